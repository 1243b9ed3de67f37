#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_api (tests/fuzz/corpus/): a few small
calls spelled in the byte order fuzz_api.c decodes them (head, sizes,
dtype, options, lengths, mask/bias broadcast, twelve tensors, extras).
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
    return out + bytes([extra])


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
}

os.makedirs(os.path.join(HERE, "corpus"), exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(HERE, "corpus", name), "wb") as f:
        f.write(data)
print(f"{len(seeds)} seeds in {os.path.join(HERE, 'corpus')}")
