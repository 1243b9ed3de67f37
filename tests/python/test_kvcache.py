"""flashattn.attention_kvcache and flashattn.merge_states against a float64 reference written here."""

import numpy as np
import pytest

import flashattn


def _ref(q, kc, vc, seqlens, knew, vnew, bt, causal):
    """float64: append, then bottom-right softmax over cache_seqlens + L_new keys ([B, H, L, D] layout)."""
    B, Hq, Lq, D = q.shape
    Hkv = kc.shape[1]
    kc, vc = kc.astype(np.float64).copy(), vc.astype(np.float64).copy()
    Lnew = 0 if knew is None else knew.shape[2]
    ps = kc.shape[2]

    def at(b, j):
        return (b, j) if bt is None else (bt[b, j // ps], j % ps)

    for b in range(B):
        for t in range(Lnew):
            pg, r = at(b, seqlens[b] + t)
            kc[pg, :, r] = knew[b, :, t]
            vc[pg, :, r] = vnew[b, :, t]
    o = np.zeros((B, Hq, Lq, vc.shape[3]))
    lse = np.full((B, Hq, Lq), -np.inf)
    for b in range(B):
        lk = seqlens[b] + Lnew
        pos = [at(b, j) for j in range(lk)]
        for h in range(Hq):
            g = h // (Hq // Hkv)
            K = np.array([kc[p, g, r] for p, r in pos]).reshape(lk, D)
            V = np.array([vc[p, g, r] for p, r in pos]).reshape(lk, -1)
            for i in range(Lq):
                s = K @ q[b, h, i].astype(np.float64) / np.sqrt(D)
                if causal:
                    s[np.arange(lk) > i + lk - Lq] = -np.inf
                if lk == 0 or np.all(np.isinf(s)):
                    continue
                m = s.max()
                w = np.exp(s - m)
                o[b, h, i] = w @ V / w.sum()
                lse[b, h, i] = m + np.log(w.sum())
    return o, lse, kc, vc


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("append", [0, 1, 3])
def test_kvcache_cpu(paged, append):
    rng = np.random.default_rng(1)
    B, Hq, Hkv, Lq, D, cap, ps = 2, 4, 2, 3, 16, 64, 16
    q = rng.standard_normal((B, Hq, Lq, D), dtype=np.float32)
    seqlens = np.array([5, 40], np.int32)
    if paged:
        npages = B * cap // ps + 2
        kc = rng.standard_normal((npages, Hkv, ps, D), dtype=np.float32)
        bt = rng.permutation(npages)[: B * cap // ps].reshape(B, -1).astype(np.int32)
    else:
        kc = rng.standard_normal((B, Hkv, cap, D), dtype=np.float32)
        bt = None
    vc = rng.standard_normal(kc.shape, dtype=np.float32)
    knew = rng.standard_normal((B, Hkv, append, D), dtype=np.float32) if append else None
    vnew = rng.standard_normal((B, Hkv, append, D), dtype=np.float32) if append else None
    ro, rl, rk, rv = _ref(q, kc, vc, seqlens, knew, vnew, bt, True)
    for backend in ("ref", "cpu"):
        k2, v2 = kc.copy(), vc.copy()
        for splits in (0, 1, 5):
            o, lse = flashattn.attention_kvcache(
                q, k2, v2, seqlens, knew, vnew, block_table=bt, num_splits=splits, causal=True, backend=backend
            )
            np.testing.assert_allclose(o, ro, atol=2e-4)
            np.testing.assert_allclose(lse, rl, atol=2e-4)
            np.testing.assert_allclose(k2, rk, atol=0)
            np.testing.assert_allclose(v2, rv, atol=0)


def test_kvcache_past_capacity_untouched():
    q = np.zeros((1, 1, 1, 8), np.float32)
    kc = np.ones((1, 1, 4, 8), np.float32)
    vc = kc.copy()
    kn = np.full((1, 1, 2, 8), 5, np.float32)
    with pytest.raises(flashattn.FlashAttnError, match="cache_seqlens"):
        flashattn.attention_kvcache(q, kc, vc, [3], kn, kn.copy(), backend="cpu")
    assert (kc == 1).all() and (vc == 1).all()


def test_merge_states():
    e = np.e
    o1 = np.array([(10 * e + 20 * e * e) / (e + e * e)]).reshape(1, 1, 1, 1)
    l1 = np.array([np.log(e + e * e)]).reshape(1, 1, 1)
    o2 = np.full((1, 1, 1, 1), 40.0)
    l2 = np.full((1, 1, 1), 3.0)
    o, lse = flashattn.merge_states([o1, o2], [l1, l2])
    assert abs(o[0, 0, 0, 0] - 32.405) < 1e-3
    assert abs(lse[0, 0, 0] - np.log(e + e * e + e**3)) < 1e-12
    o, lse = flashattn.merge_states([np.zeros((1, 1, 2, 3))] * 2, [np.full((1, 1, 2), -np.inf)] * 2)
    assert (o == 0).all() and np.isneginf(lse).all()
