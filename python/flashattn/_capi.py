"""The one C boundary: include/flashattn.h through ctypes.

Why ctypes (and not a compiled extension, cffi or nanobind): the library
already has a stable C ABI, so binding it needs no compiler at install time
beyond the one CMake drives for the library itself, and the package works
with any Python 3 and any PyTorch (a PyTorch C++ extension breaks on every
torch upgrade). The price is a few microseconds per call to fill the
structs below; bench/python_overhead.py measures it.

The structs mirror flashattn.h field for field; ctypes lays them out with
the platform's C alignment rules, as the compiler does. Nothing here knows
a rule of attention: masks, dropout, validation and dispatch happen in C.
"""

import ctypes as C
import os
import struct
import threading
from pathlib import Path

# ---- enums (flashattn.h order) ---------------------------------------------
F32, F64, F16, BF16, BOOL, F8_E4M3 = range(6)
MEMORY_AUTO, MEMORY_HOST, MEMORY_CUDA = range(3)
BACKENDS = ("auto", "ref", "cpu", "cuda")
ISAS = ("auto", "generic", "avx2", "avx512", "avx512bf16", "amx")
ALIGNS = ("top_left", "bottom_right")
STATUS_NAMES = (
    "FA_OK",
    "FA_ERR_NULL_POINTER",
    "FA_ERR_BAD_SIZE",
    "FA_ERR_SHAPE",
    "FA_ERR_OVERLAP",
    "FA_ERR_DTYPE",
    "FA_ERR_DROPOUT",
    "FA_ERR_HEADS",
    "FA_ERR_SEQLENS",
    "FA_ERR_OPTION",
    "FA_ERR_UNSUPPORTED",
    "FA_ERR_NO_BACKEND",
    "FA_ERR_MEMORY_SPACE",
    "FA_ERR_OUT_OF_MEMORY",
    "FA_ERR_DEVICE",
    "FA_ERR_INTERNAL",
)


class Tensor(C.Structure):
    _fields_ = [
        ("data", C.c_void_p),
        ("dtype", C.c_int),
        ("shape", C.c_int64 * 4),
        ("stride", C.c_int64 * 4),
        ("memory", C.c_int),
    ]


class Options(C.Structure):
    _fields_ = [
        ("scale", C.c_double),
        ("softcap", C.c_double),
        ("causal", C.c_int),
        ("align", C.c_int),
        ("use_window", C.c_int),
        ("window_left", C.c_int64),
        ("window_right", C.c_int64),
        ("seqlens_q", C.c_void_p),
        ("seqlens_k", C.c_void_p),
        ("cu_seqlens_q", C.c_void_p),
        ("cu_seqlens_k", C.c_void_p),
        ("num_seqs", C.c_int64),
        ("mask", Tensor),
        ("bias", Tensor),
        ("alibi_slopes", C.c_void_p),
        ("dropout_p", C.c_double),
        ("dropout_seed", C.c_uint64),
        ("dropout_offset", C.c_uint32),
        ("deterministic", C.c_int),
        ("block_q", C.c_int),
        ("block_k", C.c_int),
        # the FP8 forward's descales (appended last in flashattn.h)
        ("q_descale", Tensor),
        ("k_descale", Tensor),
        ("v_descale", Tensor),
        # positions of row 0 and key 0 in the whole sequence (appended last in flashattn.h)
        ("q_offset", C.c_int64),
        ("k_offset", C.c_int64),
    ]


class KvCache(C.Structure):
    """fa_kvcache of flashattn.h (the numpy layer fills one; the torch layer packs its bytes, _KVCACHE)."""

    _fields_ = [
        ("k_cache", Tensor),
        ("v_cache", Tensor),
        ("cache_seqlens", C.c_void_p),
        ("block_table", C.c_void_p),
        ("max_blocks", C.c_int64),
        ("block_table_stride", C.c_int64),
        ("k_new", Tensor),
        ("v_new", Tensor),
        ("rotary_cos", C.c_void_p),
        ("rotary_sin", C.c_void_p),
        ("rotary_len", C.c_int64),
        ("rotary_dim", C.c_int64),
        ("rotary_interleaved", C.c_int),
        ("num_splits", C.c_int),
    ]


class CpuPlan(C.Structure):
    _fields_ = [
        ("isa", C.c_int),
        ("block_q", C.c_int),
        ("block_k", C.c_int),
        ("working_set_bytes", C.c_size_t),
        ("l1d_bytes", C.c_size_t),
        ("l2_bytes", C.c_size_t),
    ]


# ---- errors ----------------------------------------------------------------
class FlashAttnError(Exception):
    """A call the C library refused or failed; .status is the fa_status name
    (e.g. "FA_ERR_SHAPE") and the message is the library's, naming the
    argument. Subclasses are also ValueError, TypeError, ... (below)."""

    def __init__(self, status, message):
        if not message:
            message = status
        elif status not in message:
            message = f"{message} [{status}]"
        super().__init__(message)
        self.status = status


class FlashAttnValueError(FlashAttnError, ValueError):
    pass


class FlashAttnTypeError(FlashAttnError, TypeError):
    pass


class UnsupportedError(FlashAttnError, NotImplementedError):
    """The backend asked for lacks a feature, a dtype or a device."""


class FlashAttnMemoryError(FlashAttnError, MemoryError):
    pass


class FlashAttnRuntimeError(FlashAttnError, RuntimeError):
    pass


_ERROR_CLASS = {
    "FA_ERR_DTYPE": FlashAttnTypeError,
    "FA_ERR_UNSUPPORTED": UnsupportedError,
    "FA_ERR_NO_BACKEND": UnsupportedError,
    "FA_ERR_OUT_OF_MEMORY": FlashAttnMemoryError,
    "FA_ERR_DEVICE": FlashAttnRuntimeError,
    "FA_ERR_INTERNAL": FlashAttnRuntimeError,
}


def error(status, message):
    """The exception for a non-zero fa_status (an int or its name)."""
    name = STATUS_NAMES[status] if isinstance(status, int) and 0 <= status < len(STATUS_NAMES) else str(status)
    return _ERROR_CLASS.get(name, FlashAttnValueError)(name, message)


def invalid(message, status="FA_ERR_OPTION"):
    """A bad argument caught before the C call (a name, a Python type, an
    array's rank): the exception C would raise for that status, so that every
    bad input is a FlashAttnError (FA_ERR_DTYPE: a TypeError, else ValueError)."""
    return error(status, message)


# ---- the library -----------------------------------------------------------
def _library_path():
    """FLASHATTN_LIBRARY (a libflashattn.so built elsewhere, e.g. by CMake in
    build/), else the one pip installed beside this file."""
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for name in ("libflashattn.so", "libflashattn.dylib", "flashattn.dll"):
        if (here / name).exists():
            return str(here / name)
    raise ImportError(
        f"flashattn: libflashattn is not in {here}; install the package with `pip install .` "
        "or point FLASHATTN_LIBRARY at a libflashattn.so"
    )


def _load():
    lib = C.CDLL(_library_path())
    P, i32, i64, vp, cp = C.POINTER, C.c_int, C.c_int64, C.c_void_p, C.c_char_p
    protos = {
        "fa_status_name": (cp, [i32]),
        "fa_backend_available": (i32, [i32, cp, C.c_size_t]),
        "fa_cuda_device_describe": (i32, [cp, C.c_size_t]),
        "fa_cpu_isa_supported": (i32, [i32]),
        "fa_cpu_plan_get": (i32, [i32, i64, i64, i32, i32, P(CpuPlan)]),
        "fa_cpu_plan_get_dtype": (i32, [i32, i32, i64, i64, i32, i32, P(CpuPlan)]),
        "fa_context_create": (i32, [P(vp)]),
        "fa_context_destroy": (None, [vp]),
        "fa_context_set_threads": (i32, [vp, i32]),
        "fa_context_set_cpu_isa": (i32, [vp, i32]),
        "fa_context_set_stream": (i32, [vp, vp]),
        "fa_context_set_device_checks": (i32, [vp, i32]),
        "fa_context_last_error": (cp, [vp]),
        "fa_context_last_backend": (i32, [vp]),
        "fa_context_dispatch_report": (cp, [vp]),
        # tensors and options by address (see _Context.tensor): a call packs
        # its structs into one buffer instead of building ctypes objects
        "fa_forward": (i32, [vp, i32] + [vp] * 6),
        "fa_backward": (i32, [vp, i32] + [vp] * 11),
        "fa_forward_kvcache": (i32, [vp, i32] + [vp] * 5),
        "fa_merge_states": (i32, [vp, i32, i32] + [vp] * 4),
        "fa_dropout_mask": (
            i32,
            [C.c_double, C.c_uint64, C.c_uint32, i64, i64, i64, i64, C.c_void_p, cp, C.c_size_t],
        ),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


lib = _load()


# fa_tensor as bytes: packing one costs ~0.2 us, building a ctypes Tensor ~2 us
_TENSOR = struct.Struct("@Pi4x4q4qi4x")
assert _TENSOR.size == C.sizeof(Tensor) and Tensor.memory.offset == 80, "fa_tensor layout"
_SLOTS = 12
# fa_kvcache as bytes: two tensors, the seqlens / block-table words, two tensors, the rotary words
_KVCACHE = struct.Struct("@" + _TENSOR.format[1:] * 2 + "PPqq" + _TENSOR.format[1:] * 2 + "PPqqii")
assert _KVCACHE.size == C.sizeof(KvCache) and KvCache.k_new.offset == 2 * _TENSOR.size + 32, "fa_kvcache layout"
assert KvCache.num_splits.offset == _KVCACHE.size - 4, "fa_kvcache layout"
_NO_TENSOR = (0,) * 11  # data NULL = none
# fa_options: the FP8 descales were appended after block_k; the fields before keep their offsets
assert Options.q_descale.offset == (Options.block_k.offset + 4 + 7) // 8 * 8, "fa_options layout"
assert Options.q_offset.offset == Options.v_descale.offset + C.sizeof(Tensor), "fa_options layout"
assert C.sizeof(Options) == Options.k_offset.offset + 8, "fa_options layout"


# ---- contexts: one per thread (the header's rule), created on first use ----
class _Context:
    def __init__(self):
        self.ptr = C.c_void_p()
        st = lib.fa_context_create(C.byref(self.ptr))
        if st != 0:
            raise error(st, "fa_context_create failed")
        self.threads = None
        self.isa = None
        self.stream = None
        self.device_checks = True
        self.buf = C.create_string_buffer(_TENSOR.size * _SLOTS)  # the fa_tensors of the call in flight
        self.base = C.addressof(self.buf)
        self.kvbuf = None  # the fa_kvcache of the call in flight (see kvcache)
        self.options_cache = {}

    def tensor(self, slot, data, dtype, shape, strides, memory):
        """Packs an fa_tensor into slot (0 .. 11) of this context's buffer and
        returns its address; shape and strides have 3 or 4 entries."""
        if len(shape) == 3:
            shape, strides = (*shape, 1), (*strides, 0)
        _TENSOR.pack_into(self.buf, slot * _TENSOR.size, data, dtype, *shape, *strides, memory)
        return self.base + slot * _TENSOR.size

    def kvcache(self, k_cache, v_cache, cache_seqlens, block_table, max_blocks, k_new, v_new, rotary, num_splits):
        """Packs an fa_kvcache into this context's buffer and returns its address. The tensors are
        (data, dtype, shape, strides, memory) with 4-entry shape and strides (k_new, v_new: or None);
        cache_seqlens, block_table are addresses (block_table: or None, then max_blocks is ignored);
        rotary is None or (cos address, sin address, rotary_len, rotary_dim, interleaved)."""
        if self.kvbuf is None:
            self.kvbuf = C.create_string_buffer(_KVCACHE.size)

        def flat(t):
            return _NO_TENSOR if t is None else (t[0], t[1], *t[2], *t[3], t[4])

        cos, sin, rlen, rdim, inter = (0, 0, 0, 0, 0) if rotary is None else rotary
        _KVCACHE.pack_into(
            self.kvbuf, 0, *flat(k_cache), *flat(v_cache), cache_seqlens, block_table or 0,
            max_blocks if block_table else 0, 0, *flat(k_new), *flat(v_new),
            cos, sin, rlen, rdim, int(bool(inter)), num_splits,
        )  # fmt: skip
        return C.addressof(self.kvbuf)

    def cached_options(self, key, make):
        """fa_options for a key of option values, built once (a model calls
        attention with the same few option sets over and over)."""
        return self._cached(key, make)[0]

    def cached_options_address(self, key, make):
        """The address of cached_options(key, make) (the cache keeps it alive)."""
        return self._cached(key, make)[1]

    def _cached(self, key, make):
        hit = self.options_cache.get(key)
        if hit is None:
            if len(self.options_cache) >= 64:
                self.options_cache.clear()
            opt = make()
            hit = self.options_cache[key] = (opt, C.addressof(opt))
        return hit

    def __del__(self):
        if self.ptr:
            lib.fa_context_destroy(self.ptr)
            self.ptr = C.c_void_p()

    def configure(self, threads, isa, stream):
        """Sets threads, ISA and stream, calling C only when they change."""
        if threads != self.threads:
            st = lib.fa_context_set_threads(self.ptr, threads)
            if st != 0:
                raise error(st, self.last_error())
            self.threads = threads
        if isa != self.isa:
            st = lib.fa_context_set_cpu_isa(self.ptr, isa)
            if st != 0:
                raise error(st, self.last_error())
            self.isa = isa
        if stream != self.stream:
            st = lib.fa_context_set_stream(self.ptr, stream)
            if st != 0:
                raise error(st, self.last_error())
            self.stream = stream

    def set_device_checks(self, on):
        """fa_context_set_device_checks, called only when the setting changes."""
        on = bool(on)
        if on != self.device_checks:
            lib.fa_context_set_device_checks(self.ptr, int(on))
            self.device_checks = on

    def last_error(self):
        return lib.fa_context_last_error(self.ptr).decode()

    def check(self, status):
        if status != 0:
            raise error(status, self.last_error())


_local = threading.local()


def context():
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = _Context()
    return ctx


# ---- small constructors ----------------------------------------------------
def tensor(data, dtype, shape, strides, memory):
    """An fa_tensor; shape and strides (in elements) have 1 to 4 entries."""
    n = len(shape)
    shape = tuple(shape) + (1,) * (4 - n)
    strides = tuple(strides) + (0,) * (4 - n)
    return Tensor(data, dtype, shape, strides, memory)


def code_of(name, names, arg):
    """The enum value of a name ("cpu", "bottom_right", ...), or FlashAttnValueError naming arg."""
    try:
        return names.index(name)
    except ValueError:
        raise invalid(f"{arg} = {name!r}, expected one of {', '.join(map(repr, names))}") from None


def options(
    *,
    scale=None,
    softcap=0.0,
    causal=False,
    align="top_left",
    window=None,
    seqlens_q=None,
    seqlens_k=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    num_seqs=0,
    mask=None,
    bias=None,
    alibi_slopes=None,
    dropout_p=0.0,
    dropout_seed=0,
    dropout_offset=0,
    deterministic=False,
    block_q=0,
    block_k=0,
    q_descale=None,
    k_descale=None,
    v_descale=None,
    q_offset=0,
    k_offset=0,
):
    """fa_options from the C option names. Pointers (seqlens, slopes) are
    ints; mask, bias and the FP8 descales are Tensor structs. Values go to C unchanged (C
    validates them); only the Python-side shapes of the values are checked
    here (window is a pair, align a name)."""
    o = Options()
    o.scale = 0.0 if scale is None else float(scale)
    o.softcap = float(softcap or 0.0)
    o.causal = int(bool(causal))
    o.align = code_of(align, ALIGNS, "align")
    if window is not None:
        try:
            left, right = window
        except (TypeError, ValueError):
            raise invalid(f"window = {window!r}, expected a pair (left, right); -1 = unbounded") from None
        o.use_window = int(left >= 0 or right >= 0)
        o.window_left, o.window_right = int(left), int(right)
    o.seqlens_q, o.seqlens_k = seqlens_q, seqlens_k
    o.cu_seqlens_q, o.cu_seqlens_k = cu_seqlens_q, cu_seqlens_k
    o.num_seqs = int(num_seqs)
    if mask is not None:
        o.mask = mask
    if bias is not None:
        o.bias = bias
    o.alibi_slopes = alibi_slopes
    o.dropout_p = float(dropout_p)
    if not 0 <= int(dropout_seed) < 2**64:
        raise invalid(f"dropout_seed = {dropout_seed} must be in [0, 2**64)", "FA_ERR_DROPOUT")
    if not 0 <= int(dropout_offset) < 2**32:
        raise invalid(f"dropout_offset = {dropout_offset} must be in [0, 2**32)", "FA_ERR_DROPOUT")
    o.dropout_seed, o.dropout_offset = int(dropout_seed), int(dropout_offset)
    o.deterministic = int(bool(deterministic))
    o.block_q, o.block_k = int(block_q), int(block_k)
    for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if t is not None:
            setattr(o, name, t)
    for name, x in (("q_offset", q_offset), ("k_offset", k_offset)):
        x = int(x)  # C checks [0, 2^60]; only what int64 cannot hold is refused here
        if not -(2**63) <= x < 2**63:
            raise invalid(f"{name} = {x} is outside [0, 2^60]")
        setattr(o, name, x)
    return o


def _addr(x):
    """A struct's address; addresses (ints) and None pass through."""
    return x if x is None or isinstance(x, int) else C.addressof(x)


def forward(ctx, backend, q, k, v, opt, o, lse):
    """fa_forward; each struct argument is a ctypes struct or an address."""
    ctx.check(lib.fa_forward(ctx.ptr, backend, *map(_addr, (q, k, v, opt, o, lse))))


def backward(ctx, backend, q, k, v, o, do, lse, opt, dq, dk, dv, dbias):
    """fa_backward; each struct argument is a ctypes struct or an address."""
    ctx.check(lib.fa_backward(ctx.ptr, backend, *map(_addr, (q, k, v, o, do, lse, opt, dq, dk, dv, dbias))))


def forward_kvcache(ctx, backend, q, cache, opt, o, lse):
    """fa_forward_kvcache; each struct argument is a ctypes struct or an address (lse: or None)."""
    ctx.check(lib.fa_forward_kvcache(ctx.ptr, backend, *map(_addr, (q, cache, opt, o, lse))))


def merge_parts(o_parts, lse_parts):
    """merge_states' arguments as two lists of the same length >= 1 (FA_ERR_BAD_SIZE otherwise)."""
    try:
        o_parts, lse_parts = list(o_parts), list(lse_parts)
    except TypeError:
        raise invalid("o_parts and lse_parts must be sequences of arrays / tensors", "FA_ERR_BAD_SIZE") from None
    if not o_parts or len(lse_parts) != len(o_parts):
        raise invalid(
            f"{len(o_parts)} o_parts and {len(lse_parts)} lse_parts: expected the same number >= 1", "FA_ERR_BAD_SIZE"
        )
    return o_parts, lse_parts


def merge_states(ctx, backend, o_parts, lse_parts, o, lse):
    """fa_merge_states over two sequences of n Tensor structs; o, lse: structs or addresses (lse: or None)."""
    n = len(o_parts)
    tos, tls = (Tensor * n)(*o_parts), (Tensor * n)(*lse_parts)
    ctx.check(lib.fa_merge_states(ctx.ptr, backend, n, C.addressof(tos), C.addressof(tls), _addr(o), _addr(lse)))


def last_backend():
    """The backend that ran this thread's last call ("auto" if none did)."""
    return BACKENDS[lib.fa_context_last_backend(context().ptr)]


def dispatch_report():
    """For this thread's last call: one line per backend, why it was taken or passed over."""
    return lib.fa_context_dispatch_report(context().ptr).decode()
