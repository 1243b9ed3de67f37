"""The numpy face: attention(q, k, v, **options) -> (o, lse) and
attention_backward(...) -> (dq, dk, dv[, dbias]) on host memory (ref and cpu).

Options are the C options by their names (fa_options in flashattn.h).
Arrays are [B, H, L, D] (layout="bhsd") or [B, L, H, D] (layout="bshd");
any strides work without a copy (a view is described to C by its strides).
float64 runs on ref; float32, float16 and bfloat16 (ml_dtypes.bfloat16)
wherever the C library takes them. Masks and biases broadcast the numpy way
(fewer than 4 dims get leading 1s). Outputs are new arrays in the layout of
the inputs.
"""

import inspect

import numpy as np

from . import _capi

_LAYOUTS = ("bhsd", "bshd")
# fa_options by name (num_seqs is derived from cu_seqlens), and the context's settings
_OPTIONS = set(inspect.signature(_capi.options).parameters) - {"num_seqs"}


def _dtype_code(a, arg):
    dt = a.dtype
    if dt == np.float32:
        return _capi.F32
    if dt == np.float64:
        return _capi.F64
    if dt == np.float16:
        return _capi.F16
    if dt == np.bool_:
        return _capi.BOOL
    if dt.name == "bfloat16":  # ml_dtypes.bfloat16 (as JAX and TensorFlow use it)
        return _capi.BF16
    if dt.name == "float8_e4m3fn":  # ml_dtypes.float8_e4m3fn: the FP8 forward's q, k, v
        return _capi.F8_E4M3
    raise _capi.invalid(
        f"{arg}.dtype = {dt}: flashattn takes float64, float32, float16, ml_dtypes.bfloat16, "
        "ml_dtypes.float8_e4m3fn (and bool masks)",
        "FA_ERR_DTYPE",
    )


def _array(x, arg):
    if not isinstance(x, np.ndarray):
        raise _capi.invalid(f"{arg} must be a numpy array, got {type(x).__name__}", "FA_ERR_DTYPE")
    return x


def _elem_strides(a, arg):
    item = a.itemsize
    for s in a.strides:
        if s % item:
            raise _capi.invalid(f"{arg}.strides = {a.strides} are not whole elements of {item} bytes", "FA_ERR_SHAPE")
    return tuple(s // item for s in a.strides)


def _spec(a, arg, layout, ndim=4):
    """(data, dtype, shape, strides, memory) of the fa_tensor of a [B, H, L, D]
    (or [B, L, H, D]) array, without a copy."""
    a = _array(a, arg)
    if a.ndim != ndim:
        want = "[B, H, L, D]" if layout == "bhsd" else "[B, L, H, D]"
        if ndim == 3:
            want = "[B, H, L]"
        raise _capi.invalid(f"{arg} has shape {a.shape}, expected {ndim} dimensions {want}", "FA_ERR_SHAPE")
    shape, strides = a.shape, _elem_strides(a, arg)
    if layout == "bshd" and ndim == 4:
        shape = (shape[0], shape[2], shape[1], shape[3])
        strides = (strides[0], strides[2], strides[1], strides[3])
    return a.ctypes.data, _dtype_code(a, arg), shape, strides, _capi.MEMORY_HOST


def _tensor(a, arg, layout, ndim=4):
    """The fa_tensor (a ctypes struct) of _spec."""
    return _capi.tensor(*_spec(a, arg, layout, ndim))


def _broadcast_tensor(a, arg):
    """mask / bias: up to 4 dims, leading 1s added as numpy broadcasting does."""
    a = _array(a, arg)
    if a.ndim > 4:
        raise _capi.invalid(f"{arg} has shape {a.shape}, expected at most 4 dimensions [B, H, Lq, Lk]", "FA_ERR_SHAPE")
    shape = (1,) * (4 - a.ndim) + a.shape
    strides = (0,) * (4 - a.ndim) + _elem_strides(a, arg)
    return _capi.tensor(a.ctypes.data, _dtype_code(a, arg), shape, strides, _capi.MEMORY_HOST)


def _int32(x, arg, n=None):
    """seqlens / cu_seqlens as a contiguous int32 array (C reads a bare pointer,
    so its length is checked here)."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise _capi.invalid(f"{arg}.dtype = {a.dtype}, expected integers (int32)", "FA_ERR_DTYPE")
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        want = f"[{n}]" if n is not None else "1-d"
        raise _capi.invalid(f"{arg} has shape {a.shape}, expected {want}", "FA_ERR_SEQLENS")
    if a.size and (a.min() < -(2**31) or a.max() >= 2**31):
        raise _capi.invalid(f"{arg} has values outside int32", "FA_ERR_SEQLENS")
    return np.ascontiguousarray(a, dtype=np.int32)


def _empty(shape_bhsd, dtype, layout, zeroed):
    B, H, L, D = shape_bhsd
    new = np.zeros if zeroed else np.empty
    if layout == "bshd":
        return new((B, L, H, D), dtype)
    return new((B, H, L, D), dtype)


class _Call:
    """The arguments of one call, mapped to C, with the arrays kept alive."""

    def __init__(self, q, k, v, layout, opts):
        if layout not in _LAYOUTS:
            raise _capi.invalid(f"layout = {layout!r}, expected 'bhsd' ([B, H, L, D]) or 'bshd' ([B, L, H, D])")
        self.layout = layout
        self.q, self.k, self.v = (_tensor(x, n, layout) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        self.keep = []
        B, Hq = q.shape[0], self.q.shape[1]
        o = dict(opts)
        backend = _capi.code_of(o.pop("backend", "auto"), _capi.BACKENDS, "backend")
        threads = int(o.pop("threads", 0))
        isa = _capi.code_of(o.pop("isa", "auto"), _capi.ISAS, "isa")
        unknown = sorted(set(o) - _OPTIONS)
        if unknown:
            raise _capi.invalid(f"unknown option {unknown[0]!r}; the options are {', '.join(sorted(_OPTIONS))}")
        for name in ("mask", "bias"):
            if o.get(name) is not None:
                self.keep.append(o[name])
                o[name] = _broadcast_tensor(o[name], name)
        for name in ("q_descale", "k_descale", "v_descale"):
            if o.get(name) is not None:
                o[name] = self._descale(o[name], name)
        if o.get("alibi_slopes") is not None:
            slopes = np.ascontiguousarray(o["alibi_slopes"], dtype=np.float32)
            if slopes.shape != (Hq,):
                raise _capi.invalid(
                    f"alibi_slopes has shape {slopes.shape}, expected [{Hq}] (one per query head)",
                    "FA_ERR_SHAPE",
                )
            self.keep.append(slopes)
            o["alibi_slopes"] = slopes.ctypes.data
        for name in ("seqlens_q", "seqlens_k"):
            if o.get(name) is not None:
                a = _int32(o[name], name, B)
                self.keep.append(a)
                o[name] = a.ctypes.data
        cu = [o.get("cu_seqlens_q"), o.get("cu_seqlens_k")]
        for i, name in enumerate(("cu_seqlens_q", "cu_seqlens_k")):
            if cu[i] is not None:
                a = _int32(cu[i], name)
                self.keep.append(a)
                o[name] = a.ctypes.data
                o["num_seqs"] = a.shape[0] - 1
                if i == 1 and cu[0] is not None and len(cu[0]) != len(cu[1]):
                    raise _capi.invalid(
                        f"cu_seqlens_q has {len(cu[0])} entries but cu_seqlens_k has {len(cu[1])}",
                        "FA_ERR_SEQLENS",
                    )
        self.backend = backend
        # C leaves rows past the last packed sequence untouched; here outputs
        # are new arrays, so those rows are defined: o = 0, lse = -inf, grads 0
        self.packed = cu[0] is not None or cu[1] is not None
        self.opt = _capi.options(**o)
        self.ctx = _capi.context()
        self.ctx.configure(threads, isa, None)

    def _descale(self, x, arg):
        """An FP8 descale: a number, or float32 [B, Hkv] (fewer dims broadcast)."""
        a = np.asarray(x, dtype=np.float32)
        if a.ndim > 2:
            raise _capi.invalid(f"{arg} has shape {a.shape}, expected [B, Hkv] or fewer dims", "FA_ERR_SHAPE")
        self.keep.append(a)
        shape = (1,) * (2 - a.ndim) + a.shape + (1, 1)
        strides = (0,) * (2 - a.ndim) + tuple(s // 4 for s in a.strides) + (0, 0)
        return _capi.tensor(a.ctypes.data, _capi.F32, shape, strides, _capi.MEMORY_HOST)


def _is_fp8(x):
    return getattr(getattr(x, "dtype", None), "name", None) == "float8_e4m3fn"


def _out_dtype(q, options):
    """o's dtype: q's, or for e4m3 inputs out_dtype (bfloat16, the default, or float16)."""
    name = options.pop("out_dtype", None)
    if not _is_fp8(q):
        if name is not None:
            raise _capi.invalid("out_dtype is for float8_e4m3fn inputs only (o has q's dtype otherwise)")
        return getattr(q, "dtype", None)
    import ml_dtypes

    if name is None or np.dtype(name) == np.dtype(ml_dtypes.bfloat16):
        return np.dtype(ml_dtypes.bfloat16)
    if np.dtype(name) == np.float16:
        return np.dtype(np.float16)
    raise _capi.invalid(f"out_dtype = {name!r}: the FP8 forward writes bfloat16 or float16", "FA_ERR_DTYPE")


# options with scalar values only: such a call packs its tensors into the
# context's buffer and reuses a cached fa_options (_hot_forward)
_SCALAR_OPTIONS = frozenset(
    ("causal", "align", "window", "scale", "softcap", "deterministic", "block_q", "block_k", "q_offset", "k_offset")
)
_SETTINGS = frozenset(("backend", "threads", "isa"))


def _hot_forward(q, k, v, layout, options):
    """attention() for a call with scalar options only (what a loop over
    layers calls), or None for any other call. Same C call, same checks."""
    try:
        key = tuple(sorted(options.items()))
        hash(key)
    except TypeError:  # e.g. window as a list
        return None
    if not (_SCALAR_OPTIONS | _SETTINGS).issuperset(options) or layout not in _LAYOUTS:
        return None
    if _is_fp8(q):  # o is not q's dtype
        return None
    specs = [_spec(x, n, layout) for x, n in ((q, "q"), (k, "k"), (v, "v"))]
    B, Hq, Lq, _ = specs[0][2]
    ctx = _capi.context()
    backend = _capi.code_of(options.get("backend", "auto"), _capi.BACKENDS, "backend")
    isa = _capi.code_of(options.get("isa", "auto"), _capi.ISAS, "isa")
    ctx.configure(int(options.get("threads", 0)), isa, None)
    opt = ctx.cached_options_address(
        ("numpy",) + key, lambda: _capi.options(**{n: x for n, x in options.items() if n in _SCALAR_OPTIONS})
    )
    o = _empty((B, Hq, Lq, specs[2][2][3]), q.dtype, layout, False)
    lse = np.empty((B, Hq, Lq), np.float64 if q.dtype == np.float64 else np.float32)
    specs += [_spec(o, "o", layout), _spec(lse, "lse", layout, ndim=3)]
    t = [ctx.tensor(i, *sp) for i, sp in enumerate(specs)]
    _capi.forward(ctx, backend, t[0], t[1], t[2], opt, t[3], t[4])
    return o, lse


def attention(q, k, v, *, layout="bhsd", **options):
    """O = softmax(score(Q Kᵀ)) V and its log-sum-exp per row.

    Returns (o, lse): o like q but with v's head dim, in the same layout;
    lse [B, H, Lq] float32 (float64 for float64 inputs), natural log, -inf
    for rows that see no key (where o is 0).

    Options (flashattn.h's fa_options): causal, align ("top_left" |
    "bottom_right"), window=(left, right) (-1 = unbounded), scale (default
    1/sqrt(D)), softcap, alibi_slopes [Hq], bias and mask (broadcast to
    [B, Hq, Lq, Lk]; mask True = visible), seqlens_q / seqlens_k [B],
    cu_seqlens_q / cu_seqlens_k [num_seqs + 1] (packed layout: B = 1, L =
    total tokens), dropout_p, dropout_seed, dropout_offset, q_offset and
    k_offset (positions of row 0 and key 0 in a longer sequence: causal,
    window, ALiBi and the dropout bits of that sequence's block; ring
    attention), block_q, block_k, backend ("auto" | "ref" | "cpu" | "cuda"), threads (cpu; 0 =
    OpenMP's default), isa ("auto" | "generic" | "avx2" | "avx512" |
    "avx512bf16" | "amx").

    FP8: q, k, v ml_dtypes.float8_e4m3fn, with q_descale, k_descale,
    v_descale (numbers, or float32 [B, Hkv]; default 1) and out_dtype
    (ml_dtypes.bfloat16, the default, or np.float16); forward only, on ref
    (host memory; the cpu backend has no FP8). docs/semantics.md, "FP8
    (e4m3)", has the rule.
    """
    hot = _hot_forward(q, k, v, layout, options)
    if hot is not None:
        return hot
    options = dict(options)
    odt = _out_dtype(q, options)
    c = _Call(q, k, v, layout, options)
    B, Hq, Lq, _ = c.q.shape
    Dv = c.v.shape[3]
    o = _empty((B, Hq, Lq, Dv), odt, layout, c.packed)
    lse = np.empty((B, Hq, Lq), np.float64 if q.dtype == np.float64 else np.float32)
    if c.packed:
        lse.fill(-np.inf)
    to, tl = _tensor(o, "o", layout), _tensor(lse, "lse", layout, ndim=3)
    _capi.forward(c.ctx, c.backend, c.q, c.k, c.v, c.opt, to, tl)
    return o, lse


def attention_backward(q, k, v, o, lse, do, *, layout="bhsd", **options):
    """Gradients of attention(): returns (dq, dk, dv), or (dq, dk, dv, dbias)
    when a bias is given (dbias has the bias's shape, summed where it
    broadcasts). Takes the forward's o and lse, the incoming gradient do and
    the same options (deterministic=True: same bits on every run)."""
    c = _Call(q, k, v, layout, options)
    to, tdo = _tensor(o, "o", layout), _tensor(do, "do", layout)
    tl = _tensor(lse, "lse", layout, ndim=3)
    dq, dk, dv = ((np.zeros_like if c.packed else np.empty_like)(x) for x in (q, k, v))
    tdq, tdk, tdv = (_tensor(x, n, layout) for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv")))
    dbias = tdb = None
    bias = options.get("bias")
    if bias is not None:
        dbias = np.empty(bias.shape, bias.dtype)  # (written whole: the shared suite poisons it first)
        tdb = _broadcast_tensor(dbias, "dbias")
    _capi.backward(c.ctx, c.backend, c.q, c.k, c.v, to, tdo, tl, c.opt, tdq, tdk, tdv, tdb)
    return (dq, dk, dv) if dbias is None else (dq, dk, dv, dbias)
