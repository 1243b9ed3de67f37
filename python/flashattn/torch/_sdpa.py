"""torch.nn.functional.scaled_dot_product_attention's signature and meaning
on flashattn: [B, H, L, D], causal aligned top-left, a boolean attn_mask
(True = takes part) or an additive float one, broadcasting as SDPA's does,
so a model swaps one function.

Differences: a row that sees no key gives 0 (SDPA's math kernel gives NaN);
the dropout mask comes from flashattn's Philox rule.
"""

import torch

from .. import _capi

from . import _fast
from ._attention import attention


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *, backend="auto"
):
    """query [B, Hq, Lq, D] (or [B, Lq, D]), key/value [B, Hkv, Lk, D|Dv] -> [B, Hq, Lq, Dv]."""
    if attn_mask is None and not dropout_p:  # the hot path of a model's layer (_fast.py)
        r = _fast.attention(query, key, value, False, scale, 0.0, is_causal, False, None, False, backend, False,
                            enable_gqa)  # fmt: skip
        if r is not None:
            return r[0]
    if attn_mask is not None and is_causal:
        raise _capi.invalid("attn_mask and is_causal: give one of them (as torch's SDPA requires)")
    three = query.dim() == 3
    if three:
        query, key, value = query[:, None], key[:, None], value[:, None]
    if query.dim() != 4:
        raise _capi.invalid(f"query has shape {tuple(query.shape)}, expected [B, H, L, D] or [B, L, D]", "FA_ERR_SHAPE")
    if not enable_gqa and key.dim() == 4 and query.shape[1] != key.shape[1]:
        raise _capi.invalid(
            f"query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True for grouped-query attention"
        )
    mask = bias = None
    if attn_mask is not None:
        if three and attn_mask.dim() == 3:
            attn_mask = attn_mask[:, None]
        if attn_mask.dtype == torch.bool:
            mask = attn_mask
        else:
            bias = attn_mask
    out = attention(
        query, key, value, causal=is_causal, scale=scale, mask=mask, bias=bias, dropout_p=dropout_p, backend=backend
    )
    return out[:, 0] if three else out
