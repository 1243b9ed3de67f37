// The decode kernels for f32 (decode_launch.cuh), one translation unit per dtype.
#include "decode_launch.cuh"

FA_DECODE_INSTANTIATE(f32, float)
