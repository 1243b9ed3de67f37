// The decode kernels for bf16 (decode_launch.cuh), one translation unit per dtype.
#include "decode_launch.cuh"

FA_DECODE_INSTANTIATE(bf16, __nv_bfloat16)
