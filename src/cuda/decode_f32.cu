// The decode kernels for f32 (decode_kernel.cuh), one translation unit per dtype.
#include "decode_kernel.cuh"

FA_DECODE_INSTANTIATE(f32, float)
