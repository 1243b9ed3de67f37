// The decode kernels for bf16 (decode_kernel.cuh), one translation unit per dtype.
#include "decode_kernel.cuh"

FA_DECODE_INSTANTIATE(bf16, __nv_bfloat16)
