"""flashattn.torch.ring_attention (context parallel over torch.distributed)
against single-process flashattn attention on the same global data: 2 and 4
processes on this machine, gloo, CPU tensors (float64 on ref, float32 on cpu);
outputs, lse and gradients dq, dk, dv; causal (zig-zag and contiguous) and not, GQA,
window, softcap, ALiBi and dropout (fixed seed: the ring's calls pass their global
positions, so the keep bits and ALiBi distances are the single process's). The same for ring_flash_attn_varlen_func (packed sequences of
different lengths, one of them empty) against one flash_attn_varlen_func call on
the global packed data. A one-rank ring is bit-identical to attention() (and to
flash_attn_varlen_func). Bad input names the argument. Skipped when
torch.distributed or gloo is missing.
"""

import os
import traceback

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import flashattn.torch as ft  # noqa: E402

HAVE_GLOO = dist.is_available() and dist.is_gloo_available()
pytestmark = pytest.mark.skipif(not HAVE_GLOO, reason="torch.distributed with gloo is not available here")

TOL = {torch.float64: 1e-10, torch.float32: 2e-4}
# (name, dtype, Hq, Hkv, options, zigzag)
CASES = [
    ("full f64", torch.float64, 2, 2, {}, True),
    ("causal zigzag f64 gqa", torch.float64, 4, 2, {"causal": True}, True),
    ("causal contiguous f64", torch.float64, 2, 1, {"causal": True}, False),
    ("causal zigzag f32 gqa", torch.float32, 4, 2, {"causal": True}, True),
    ("full f32 mqa softcap", torch.float32, 4, 1, {"softcap": 5.0, "softmax_scale": 0.3}, True),
    ("window zigzag f64", torch.float64, 2, 2, {"causal": True, "window_size": (5, 0)}, True),
    ("window both f64", torch.float64, 2, 1, {"window_size": (3, 7)}, True),
    ("window contiguous f32", torch.float32, 2, 2, {"window_size": (9, 2)}, False),
    # global positions (fa_options' q_offset / k_offset)
    ("alibi causal zigzag f64 gqa", torch.float64, 4, 2, {"causal": True, "alibi_slopes": [0.5, 0.25, 0.125, 1.0]},
     True),
    ("alibi full contiguous f32", torch.float32, 2, 1, {"alibi_slopes": [0.3, 0.7]}, False),
    ("dropout causal zigzag f64", torch.float64, 2, 2, {"causal": True, "dropout_p": 0.3, "dropout_seed": 1234}, True),
    ("dropout full f32 gqa", torch.float32, 4, 2, {"dropout_p": 0.2, "dropout_seed": 77, "dropout_offset": 3}, True),
    ("alibi dropout window contiguous f32", torch.float32, 2, 2,
     {"causal": True, "window_size": (11, 0), "alibi_slopes": [0.2, 0.4], "dropout_p": 0.25, "dropout_seed": 5},
     False),
    ("alibi dropout softcap window f32", torch.float32, 2, 1,
     {"window_size": (6, 9), "alibi_slopes": [0.1, 0.3], "dropout_p": 0.1, "dropout_seed": 9, "softcap": 4.0},
     True),
]  # fmt: skip


# varlen: (name, dtype, Hq, Hkv, options, zigzag); sequence lengths VARLEN_UNITS x (2W zigzag, else W)
VARLEN_CASES = [
    ("varlen full f64", torch.float64, 2, 2, {}, True),
    ("varlen causal zigzag f64 gqa", torch.float64, 4, 2, {"causal": True}, True),
    ("varlen causal contiguous f32", torch.float32, 2, 1, {"causal": True}, False),
    ("varlen causal zigzag f32 gqa", torch.float32, 4, 2, {"causal": True}, True),
    ("varlen full f32 mqa softcap", torch.float32, 4, 1, {"softcap": 5.0, "softmax_scale": 0.3}, True),
    ("varlen window zigzag f64", torch.float64, 2, 2, {"causal": True, "window_size": (5, 0)}, True),
    ("varlen window both f32", torch.float32, 2, 1, {"window_size": (3, 7)}, True),
    ("varlen window contiguous f64", torch.float64, 2, 2, {"window_size": (9, 2)}, False),
]
VARLEN_UNITS = [3, 1, 0, 5, 2]


def _err(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    return (x - ref).abs().max().item() / max(1.0, ref.abs().max().item())


def _data(dtype, Hq, Hkv, L, seed):
    g = torch.Generator().manual_seed(seed)
    B, D = 2, 16
    q = torch.randn(B, L, Hq, D, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(B, L, Hkv, D, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(B, L, Hkv, D, generator=g, dtype=torch.float64).to(dtype)
    dout = torch.randn(B, L, Hq, D, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v, dout


def _run(fn, qkv, dout):
    """o, lse, dq, dk, dv of (o, lse) = fn(q, k, v) with o's gradient dout."""
    q, k, v = (t.clone().requires_grad_() for t in qkv)
    o, lse = fn(q, k, v)
    o.backward(dout)
    return o.detach(), lse, q.grad, k.grad, v.grad


def _dense(case, L, rank, world, seed, group=None):
    """(this rank's o, lse, dq, dk, dv through ring_attention, the same rows of single-process attention's)."""
    _, dtype, Hq, Hkv, opts, zigzag = case
    q, k, v, dout = _data(dtype, Hq, Hkv, L, seed)
    shard = lambda t: ft.shard_sequence(t, rank, world, zigzag=zigzag)  # noqa: E731
    ref = _run(lambda a, b, c: ft.attention(a, b, c, layout="bshd", causal=opts.get("causal", False),
                                            scale=opts.get("softmax_scale"), window=opts.get("window_size"),
                                            softcap=opts.get("softcap", 0.0), alibi_slopes=opts.get("alibi_slopes"),
                                            dropout_p=opts.get("dropout_p", 0.0),
                                            dropout_seed=opts.get("dropout_seed"),
                                            dropout_offset=opts.get("dropout_offset", 0), return_lse=True),
               (q, k, v), dout)  # fmt: skip
    got = _run(lambda a, b, c: ft.ring_attention(a, b, c, group, zigzag=zigzag, return_lse=True, **opts),
               map(shard, (q, k, v)), shard(dout))  # fmt: skip
    return got, [ft.shard_sequence(r, rank, world, zigzag=zigzag, dim=2 if i == 1 else 1) for i, r in enumerate(ref)]


def _cu(world, zigzag):
    n = 2 * world if zigzag else world
    return torch.tensor([0] + [sum(VARLEN_UNITS[: i + 1]) * n for i in range(len(VARLEN_UNITS))], dtype=torch.int32)


def _varlen(case, rank, world, seed, group=None):
    """(this rank's o, lse, dq, dk, dv through ring_flash_attn_varlen_func, the same rows of one
    flash_attn_varlen_func call's on the global packed data)."""
    _, dtype, Hq, Hkv, opts, zigzag = case
    cu = _cu(world, zigzag)
    q, k, v, dout = (t[0] for t in _data(dtype, Hq, Hkv, int(cu[-1]), seed))
    shard = lambda t: ft.shard_varlen(t, cu, rank, world, zigzag=zigzag)  # noqa: E731
    ref = _run(lambda a, b, c: ft.flash_attn_varlen_func(a, b, c, cu, cu, **opts, return_attn_probs=True)[:2],
               (q, k, v), dout)  # fmt: skip
    cu_ring = cu if zigzag else cu.tolist()  # a list is taken too
    got = _run(lambda a, b, c: ft.ring_flash_attn_varlen_func(a, b, c, cu_ring, None, group, zigzag=zigzag,
                                                              return_lse=True, **opts),
               map(shard, (q, k, v)), shard(dout))  # fmt: skip
    return got, [ft.shard_varlen(r, cu, rank, world, zigzag=zigzag, dim=int(i == 1)) for i, r in enumerate(ref)]


def _compare(errors, label, got, ref, tol):
    """Appends to errors where got and ref (o, lse, dq, dk, dv) differ by more than tol (None: in any bit)."""
    for what, x, r in zip(("o", "lse", "dq", "dk", "dv"), got, ref):
        if tol is None and not torch.equal(x, r):
            errors.append(f"{label}: {what} not bit-identical, error {_err(x, r):.3g}")
        elif tol is not None and not _err(x, r) <= tol:
            errors.append(f"{label}: {what} error {_err(x, r):.3g} > {tol}")


def _check_refusals(rank, world, L, errors):
    """Options the ring refuses, and bad cu_seqlens: exceptions naming the argument."""
    q, k, v, _ = _data(torch.float32, 2, 2, L // world, seed=1)
    cu = _cu(world, True)
    q3, k3, v3 = (t[0, : int(cu[-1]) // world] for t in _data(torch.float32, 2, 2, int(cu[-1]), seed=2)[:3])
    fns = {"ring_attention": lambda x, **kw: ft.ring_attention(x, k, v, **kw),
           "ring_flash_attn_varlen_func": lambda x, **kw: ft.ring_flash_attn_varlen_func(x, k3, v3, cu, **kw)}  # fmt: skip
    refused = (({"alibi_slopes": torch.ones(2)}, "alibi_slopes"), ({"dropout_p": 0.1}, "dropout_p"),
               ({"softcap": 5.0, "backend": "ref"}, "softcap"))  # fmt: skip
    for fn_name, fn in fns.items():
        x = q if fn_name == "ring_attention" else q3
        for kw, word in refused:
            if fn_name == "ring_attention" and word != "softcap":
                continue  # ring_attention takes ALiBi and dropout (global positions)
            try:
                fn(x.double() if "backend" in kw else x, **kw)
                errors.append(f"{fn_name} {word}: not refused")
            except NotImplementedError as e:
                if word not in str(e):
                    errors.append(f"{fn_name} {word}: refused without naming it: {e}")
    bad = {"not divisible": cu + torch.tensor([0, 1, 1, 1, 1, 1], dtype=torch.int32), "other total": cu * 2,
           "float": cu.double(), "2-d": cu[None]}  # fmt: skip
    for why, c in bad.items():
        try:
            ft.ring_flash_attn_varlen_func(q3, k3, v3, c)
            errors.append(f"varlen cu_seqlens {why}: not refused")
        except (ValueError, TypeError) as e:
            if "cu_seqlens" not in str(e):
                errors.append(f"varlen cu_seqlens {why}: refused without naming cu_seqlens: {e}")


def _check_shared_seed(rank, world, L, errors):
    """dropout_seed=None: the group's rank 0 draws the seed from its generator and
    broadcasts it; the ranks' generators differ here, so only the broadcast makes
    the ring equal single-process attention with rank 0's seed (outputs, f32)."""
    q, k, v, _ = _data(torch.float32, 2, 2, L, seed=3)
    torch.manual_seed(1000)
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64))  # what rank 0 draws
    torch.manual_seed(1000 + rank)
    shard = lambda t: ft.shard_sequence(t, rank, world)  # noqa: E731
    o = ft.ring_attention(shard(q), shard(k), shard(v), causal=True, dropout_p=0.5)
    ref = shard(ft.attention(q, k, v, layout="bshd", causal=True, dropout_p=0.5, dropout_seed=seed))
    if not _err(o, ref) <= TOL[torch.float32]:
        errors.append(f"dropout_seed=None (rank {rank}): error {_err(o, ref):.3g} against rank 0's seed")


def _worker(rank, world, store, L, failures):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    errors = []
    try:
        singles = [dist.new_group([r]) for r in range(world)]  # rings of one rank: one call, the same bits
        for i, case in enumerate(CASES):
            _compare(errors, f"{case[0]} (world {world}, rank {rank})", *_dense(case, L, rank, world, 100 + i),
                     TOL[case[1]])  # fmt: skip
        for i, case in enumerate(CASES[:4]):
            _compare(errors, f"{case[0]} (one rank)", *_dense(case, L, 0, 1, 200 + i, singles[rank]), None)
        _check_shared_seed(rank, world, L, errors)
        for i, case in enumerate(VARLEN_CASES):
            _compare(errors, f"{case[0]} (world {world}, rank {rank})", *_varlen(case, rank, world, 300 + i),
                     TOL[case[1]])  # fmt: skip
        for i, case in enumerate(VARLEN_CASES[1:7:2]):
            _compare(errors, f"{case[0]} (one rank)", *_varlen(case, 0, 1, 400 + i, singles[rank]), None)
        _check_refusals(rank, world, L, errors)
    except Exception:
        errors.append(f"rank {rank}: {traceback.format_exc()}")
    finally:
        dist.destroy_process_group()
    failures.put(errors)


@pytest.mark.parametrize("world", [2, 4])
def test_ring_matches_single_process(world, tmp_path):
    mp = torch.multiprocessing.get_context("spawn")
    failures = mp.SimpleQueue()
    store = os.path.join(tmp_path, "store")
    L = 16 * world  # zigzag: chunks of 8 rows
    procs = [mp.Process(target=_worker, args=(r, world, store, L, failures)) for r in range(world)]
    for p in procs:
        p.start()
    errors = []
    for _ in procs:
        errors += failures.get()
    for p in procs:
        p.join(60)
    assert not errors, "\n".join(errors)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]


def test_shard_unshard_round_trip():
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3)
    for world in (1, 2, 3):
        for zigzag in (True, False):
            shards = [ft.shard_sequence(x, r, world, zigzag=zigzag) for r in range(world)]
            assert all(s.shape == (2, 24 // world, 3) for s in shards)
            assert torch.equal(ft.unshard_sequence(shards, zigzag=zigzag), x)
    # zigzag, 2 ranks: rank 0 holds chunks 0 and 3 of 4
    s0 = ft.shard_sequence(x, 0, 2)
    assert torch.equal(s0, torch.cat([x[:, 0:6], x[:, 18:24]], 1))


def test_shard_unshard_varlen_round_trip():
    cu = torch.tensor([0, 8, 8, 32, 36], dtype=torch.int32)
    x = torch.arange(36 * 2).reshape(36, 2)
    for world in (1, 2):
        for zigzag in (True, False):
            shards = [ft.shard_varlen(x, cu, r, world, zigzag=zigzag) for r in range(world)]
            assert all(s.shape == (36 // world, 2) for s in shards)
            assert torch.equal(ft.unshard_varlen(shards, cu, zigzag=zigzag), x)
    # zigzag, 2 ranks: rank 0 holds chunks 0 and 3 of 4 of every sequence
    want = torch.cat([x[0:2], x[6:8], x[8:14], x[26:32], x[32:33], x[35:36]])
    assert torch.equal(ft.shard_varlen(x, cu, 0, 2), want)
    with pytest.raises(ValueError, match="cu_seqlens: sequence 3 has length 4, not a multiple of 8"):
        ft.shard_varlen(x, cu, 0, 4)
    with pytest.raises(ValueError, match="cu_seqlens"):
        ft.shard_varlen(x[:30], cu, 0, 2)


def test_refused_without_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    q = torch.zeros(1, 4, 1, 8)
    with pytest.raises(ValueError, match="process group"):
        ft.ring_attention(q, q, q)
