"""flashattn's public C API through ctypes (only what the GPU anchors need).

The structs mirror include/flashattn.h field for field; ctypes lays them out
with the platform's C alignment rules, like the compiler does.
"""

import ctypes as C
import os

FA_F32, FA_F64, FA_F16, FA_BF16, FA_BOOL = range(5)
FA_MEMORY_AUTO, FA_MEMORY_HOST, FA_MEMORY_CUDA = range(3)
FA_BACKEND_AUTO, FA_BACKEND_REF, FA_BACKEND_CPU, FA_BACKEND_CUDA = range(4)
FA_ALIGN_TOP_LEFT, FA_ALIGN_BOTTOM_RIGHT = range(2)


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
        ("q_descale", Tensor),  # FP8 forward only (include/flashattn.h)
        ("k_descale", Tensor),
        ("v_descale", Tensor),
        ("q_offset", C.c_int64),  # positions of row 0 / key 0 (ring attention)
        ("k_offset", C.c_int64),
    ]


def load(path):
    lib = C.CDLL(os.path.abspath(path))
    P = C.POINTER
    lib.fa_context_create.argtypes = [P(C.c_void_p)]
    lib.fa_context_create.restype = C.c_int
    lib.fa_context_destroy.argtypes = [C.c_void_p]
    lib.fa_context_set_stream.argtypes = [C.c_void_p, C.c_void_p]
    lib.fa_context_set_stream.restype = C.c_int
    lib.fa_context_set_device_checks.argtypes = [C.c_void_p, C.c_int]
    lib.fa_context_set_device_checks.restype = C.c_int
    lib.fa_context_last_error.argtypes = [C.c_void_p]
    lib.fa_context_last_error.restype = C.c_char_p
    lib.fa_options_init.argtypes = [P(Options)]
    lib.fa_forward.argtypes = [C.c_void_p, C.c_int] + [P(Tensor)] * 3 + [P(Options), P(Tensor), P(Tensor)]
    lib.fa_forward.restype = C.c_int
    lib.fa_backward.argtypes = [C.c_void_p, C.c_int] + [P(Tensor)] * 6 + [P(Options)] + [P(Tensor)] * 4
    lib.fa_backward.restype = C.c_int
    lib.fa_backend_available.argtypes = [C.c_int, C.c_char_p, C.c_size_t]
    lib.fa_backend_available.restype = C.c_int
    return lib


def tensor_of(t, dtype_code):
    """A fa_tensor viewing torch tensor t (3-d lse gets shape[3] = 1)."""
    x = Tensor()
    x.data = t.data_ptr()
    x.dtype = dtype_code
    shp = list(t.shape) + [1] * (4 - t.dim())
    std = list(t.stride()) + [1] * (4 - t.dim())
    for d in range(4):
        x.shape[d] = shp[d]
        x.stride[d] = std[d]
    x.memory = FA_MEMORY_CUDA
    return x
