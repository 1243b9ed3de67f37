// The decode kernels for f16 (decode_kernel.cuh), one translation unit per dtype.
#include "decode_kernel.cuh"

FA_DECODE_INSTANTIATE(f16, __half)
