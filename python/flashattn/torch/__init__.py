"""flashattn for PyTorch: CPU tensors run on the cpu backend, CUDA tensors on
the cuda backend (current device and stream), with autograd, through the
torch.library custom ops flashattn::fwd and flashattn::bwd (torch.compile
traces them without graph breaks).

- attention(q, k, v, **options): every C option by name, [B, H, L, D]
- flash_attn_func and friends: FlashAttention 2's interface, [B, L, H, D]
- scaled_dot_product_attention: torch SDPA's interface, [B, H, L, D]
- FP8 (torch.float8_e4m3fn q, k, v; forward only): flash_attn_func / attention
  with q_descale, k_descale, v_descale; fp8_quantize makes the inputs (per-head
  scales, optionally Hadamard-rotated q and k)
- flash_attn_with_kvcache (decode against a KV cache, appended in place; the op
  flashattn::fwd_kvcache) and merge_states (flashattn::merge_states): no autograd
- ring_attention: context parallel over torch.distributed (the sequence split
  across ranks, zig-zag layout for causal; shard_sequence / unshard_sequence);
  ring_flash_attn_varlen_func: the same over packed sequences (shard_varlen /
  unshard_varlen)
"""

from ._attention import attention
from ._flash_attn import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
)
from ._fp8 import quantize as fp8_quantize
from ._kvcache import flash_attn_with_kvcache, merge_states
from ._ring import ring_attention, shard_sequence, unshard_sequence
from ._ring_varlen import ring_flash_attn_varlen_func, shard_varlen, unshard_varlen
from ._sdpa import scaled_dot_product_attention

__all__ = [
    "attention",
    "flash_attn_func",
    "fp8_quantize",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "merge_states",
    "ring_attention",
    "ring_flash_attn_varlen_func",
    "scaled_dot_product_attention",
    "shard_sequence",
    "shard_varlen",
    "unshard_sequence",
    "unshard_varlen",
]
