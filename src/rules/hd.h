/* FA_HD marks the shared rules as callable from host C and CUDA device code
 * alike: every rule of DESIGN.md is written once and compiled into each
 * backend. */
#ifndef FA_RULES_HD_H
#define FA_RULES_HD_H

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD static inline
#endif

#endif
