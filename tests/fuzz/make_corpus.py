#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_api (tests/fuzz/corpus/): a few small
calls spelled in the byte order fuzz_api.c decodes them. The first byte
picks the call (0: fa_forward / fa_backward, 0x80: fa_forward_kvcache,
0xe0: fa_merge_states); then, for the attention calls: head, sizes, dtype,
options, lengths, mask/bias broadcast, twelve tensors, extras; for the
others see kv() and merge() below.
Rerun it after changing that order: python3 tests/fuzz/make_corpus.py"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def call(head=0, dims=(1, 1, 0, 4, 6, 7, 5), dt=0, ob=0, opts=b"", lb=0, lens=b"", bc=0, tensors=None, extra=0):
    # dims are the bytes of B, Hkv, g, Lq, Lk, D, Dv: value = 1 + byte % 8 (% 16 for D, Dv)
    out = bytes([head]) + bytes(dims) + bytes([dt, ob]) + opts + bytes([lb]) + lens + bytes([bc])
    t = tensors or {}
    for i in range(12):
        if i in (9, 11):  # dbias, bias: their dtype byte first
            out += bytes([dt])
        # flags, dtype, memory, shape, stride mode, placement
        out += t.get(i, bytes([0, 0, 0, 0, 0, 0]))
    return bytes([0]) + out + bytes([extra])


T0 = bytes([0, 0, 0, 0, 0, 0])  # a tensor: flags, dtype, memory, shape, stride mode, placement


def kv(head=0, dims=(1, 0, 1, 0, 0, 7, 7), dt=0, kb=0, rows=15, paged=None, nsb=0, ob=0, opts=b"", refb=0,
       rot=None, tensors=None, lens=(5, 9), xl=b"\0", bt=b"", xbt=b"\0", xcos=b"\0", xsin=b"\0", xal=b"\0",
       vals=b"", extra=0):
    # fa_forward_kvcache: dims are B, Hkv, g, Lq, L_new, D, Dv; kb: 1 paged, 2 no k_new, 4 rotary,
    # 8 interleaved, 16 ALiBi, 32 no lse; rows: the page size (paged) or the capacity - 1 (contiguous);
    # paged = (max_blocks byte, stride byte, pages byte, full-table byte); rot = (dim byte, len byte);
    # tensors q, k_cache, v_cache, k_new, v_new, o, lse; lens: one byte per sequence; xl .. xal: where
    # the arrays live (0: own malloc, 224..247 + tensor index: over that tensor); vals: rotary then
    # ALiBi values.
    out = bytes([0x80, head]) + bytes(dims) + bytes([dt, kb, rows])
    if kb & 1:
        out += bytes(paged or (3, 0, 5, 0))
    out += bytes([nsb, ob]) + opts + bytes([refb])
    if kb & 4:
        out += bytes(rot or (3, 0))
    t = tensors or {}
    for i in range(7):
        out += t.get(i, T0)
    return out + bytes(lens) + xl + bt + xbt + xcos + xsin + xal + vals + bytes([extra])


def merge(head=0, n=2, dims=(0, 1, 2, 3), db=0, fb=0, tensors=None, pats=(1, 3)):
    # fa_merge_states: n parts of [B, H, L, Dv]; db: dtype of the parts (low 2 bits), 4: f64 lse,
    # high nibble >= 12: o of another dtype; tensors o, lse, o_parts[0], lse_parts[0], ...;
    # pats: what each lse part holds (1 -inf, 2 half -inf, 3 small, 4 inf/nan, 5 far apart)
    out = bytes([0xE0, head, n]) + bytes(dims) + bytes([db, fb])
    t = tensors or {}
    for i in range(2 + 2 * n):
        out += t.get(i, T0)
    return out + bytes(pats[:n]) + bytes(max(0, n - len(pats)))


seeds = {
    "fwd_ref_basic": call(),
    "fwd_cpu_basic": call(head=2),
    "bwd_ref_gqa_causal": call(head=1, dims=(1, 0, 1, 6, 6, 7, 7), ob=0x01),
    "bwd_cpu_window_br_dropout": call(head=3, ob=0x26, opts=bytes([5, 3]) + bytes([1]) + bytes(8) + bytes(4)),
    "fwd_cpu_mask_bias_bcast": call(head=2, bc=0x93, extra=0x06),
    "bwd_cpu_bias_dbias": call(head=3, extra=0x0c),
    "fwd_ref_varlen": call(lb=1, lens=bytes([2, 3, 4, 1, 0, 5, 2])),
    "fwd_cpu_seqlens": call(head=2, dims=(2, 0, 0, 4, 6, 7, 7), lb=2, lens=bytes([3, 6, 0, 2, 5, 1])),
    "fwd_cpu_blocks_softcap_scale": call(head=2, ob=0x98, opts=bytes([4, 2, 0x1b])),
    "fwd_ref_o_stride_2e61": call(tensors={3: bytes([0, 0, 0, 0, 12, 1, 9, 0])}),
    "fwd_cpu_o_over_q": call(head=2, tensors={3: bytes([0, 0, 0, 0, 0, 240, 0, 0])}),
    "bwd_cpu_inf_inputs": call(head=3 | (3 << 2)),
    "fwd_cpu_f16_blhd": call(head=2, dt=2, tensors={0: bytes([0, 0, 0, 0, 7, 0])}),
    # fa_forward_kvcache
    "kv_ref_contig_append": kv(),
    "kv_cpu_contig_splits": kv(head=2, nsb=131, lens=(14, 3)),
    "kv_ref_paged_shuffled": kv(kb=1, rows=3, lens=(7, 12), bt=bytes([5, 0, 3, 1, 2, 4, 0, 1])),
    "kv_cpu_paged_vllm_layout": kv(head=2, kb=1, rows=3, lens=(7, 12), bt=bytes([5, 0, 3, 1, 2, 4, 0, 1]),
                                   tensors={1: bytes([0, 0, 0, 0, 7, 0]), 2: bytes([0, 0, 0, 0, 7, 0])}),
    "kv_cpu_paged_rotary_alibi_causal": kv(head=2, dims=(1, 1, 1, 2, 1, 7, 7), kb=1 | 4 | 16, ob=1, rows=3,
                                           lens=(7, 12), bt=bytes([5, 0, 3, 1, 2, 4, 0, 1]),
                                           vals=bytes(range(60))),
    "kv_ref_no_append_window": kv(kb=2, ob=0x04, opts=bytes([4, 2]), lens=(16, 0)),
    "kv_cpu_seqlens_over_kcache": kv(head=2, xl=bytes([230, 1])),
    "kv_ref_rotary_over_o": kv(kb=4, xcos=bytes([230, 5])),
    "kv_cpu_refused_mask": kv(head=2, refb=232),
    "kv_cpu_past_capacity": kv(head=2, lens=(15, 217)),  # 217: cache_seqlens = capacity - L_new + 1
    "kv_ref_block_table_out_of_range": kv(kb=1, rows=3, lens=(7, 12), bt=bytes([5, 0, 3, 1, 2, 4, 0, 217])),  # 217: page 6 of 6
    # fa_merge_states
    "merge_ref_two": merge(),
    "merge_cpu_three_f64_lse": merge(head=2, n=3, db=4, pats=(1, 2, 5)),
    "merge_cpu_one_inf_nan": merge(head=2, n=1, pats=(4,)),
    "merge_ref_zero_parts": merge(n=0),
    "merge_cpu_o_f16_parts_f32": merge(head=2, db=0xE0, pats=(3, 3)),
}

os.makedirs(os.path.join(HERE, "corpus"), exist_ok=True)
for old in os.listdir(os.path.join(HERE, "corpus")):
    os.remove(os.path.join(HERE, "corpus", old))
for name, data in seeds.items():
    with open(os.path.join(HERE, "corpus", name), "wb") as f:
        f.write(data)
print(f"{len(seeds)} seeds in {os.path.join(HERE, 'corpus')}")
