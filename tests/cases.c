/* The table of cases. Each runs forward and backward on every backend of
 * the build (support/backends.c) in each dtype it lists, and is compared
 * with ref in float64. Lengths are chosen so that no tile size divides
 * them (1, 5, 7, 17, 33, 65, 130): tails are where tiled kernels break.
 * Shapes stay small: ref is O(L^2 D) scalar double and the suite runs under
 * ASan in CI on two cores. */
#include "cases.h"

static const int32_t sq_3[] = {17, 5, 0}, sk_3[] = {9, 0, 17};
static const int32_t sq_br[] = {3, 17, 1}, sk_br[] = {17, 4, 9};
static const int32_t sq_ev[] = {33, 20}, sk_ev[] = {7, 65};
static const int32_t sk_none[] = {0, 0};
static const int32_t s_one[] = {1, 1};
static const int32_t sq_last[] = {1, 3}, sk_last[] = {16, 48};
static const int32_t cu_ones[] = {0, 1, 2, 3};
static const int32_t sq_dec[] = {3, 1}, sk_dec[] = {0, 259};

/* packed: seq 1 has no queries, seq 2 no keys (its rows see nothing) */
static const int32_t cu_q4[] = {0, 5, 5, 22, 23}, cu_k4[] = {0, 7, 19, 19, 31};
static const int32_t cu_q3[] = {0, 33, 40, 41}, cu_k3[] = {0, 17, 82, 95};
/* the tile cases': several tiles, the longest key length 256 (rows of a bias or mask 16-byte aligned) */
static const int32_t cu_qt[] = {0, 150, 170, 300}, cu_kt[] = {0, 64, 320, 400};
static const int32_t sq_tile[] = {160, 57}, sk_tile[] = {272, 100};
static const int32_t cu_q2[] = {0, 65, 66}, cu_k2[] = {0, 1, 66};

#define SMALL .B = 2, .Hq = 2, .Hkv = 2
#define F32_BF16 (TD_F32 | TD_BF16)

const tcase tc_cases[] = {
    /* ---- shapes ---- */
    {"basic", SMALL, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16},
    {"L1", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8},
    {"decode_Lq1_Lk65_causal_br", SMALL, .Lq = 1, .Lk = 65, .D = 16, .Dv = 16, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT},
    /* few rows against >= 256 keys: the cpu forward's decode pass (split-KV, GQA rows sharing K/V) */
    {"decode_gqa_Lq2_Lk300_causal_br", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 2, .Lk = 300, .D = 32, .Dv = 16, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT},
    /* the plain forward on the cuda decode kernels too (few rows, >= 256 keys): top-left bands, both dtypes */
    {"decode_tl_Lq4_Lk600_window_softcap_alibi_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 4, .Lk = 600, .D = 64, .Dv = 64,
     .use_window = 1, .wl = 200, .wr = 50, .softcap = 5.0, .alibi = 1, .dtypes = F32_BF16},
    {"decode_causal_tl_Lq3_Lk520", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 3, .Lk = 520, .D = 32, .Dv = 32, .causal = 1},
    {"decode_br_Lq1_Lk1000_mqa_D128_blhd", .B = 2, .Hq = 8, .Hkv = 1, .Lq = 1, .Lk = 1000, .D = 128, .Dv = 128,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .layout = TL_BLHD, .dtypes = F32_BF16},
    /* four query rows a kv head (GQA 32/8's group): the cpu decode kernels' 4-row form, 777 keys leaving
     * partial micro-tiles (and tiles) behind */
    {"decode_gqa4_Lq1_Lk777_D128_br", .B = 1, .Hq = 8, .Hkv = 2, .Lq = 1, .Lk = 777, .D = 128, .Dv = 128, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = F32_BF16},
    {"decode_padded_Lq3_Lk260_softcap_alibi", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 3, .Lk = 260, .D = 16, .Dv = 16,
     .seqlens_q = sq_dec, .seqlens_k = sk_dec, .softcap = 2.0, .alibi = 1, .layout = TL_BLHD},
    {"Lq7_Lk65", SMALL, .Lq = 7, .Lk = 65, .D = 16, .Dv = 16},
    {"Lq130_Lk33", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 130, .Lk = 33, .D = 8, .Dv = 8},
    {"Lq65_Lk130_causal", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 65, .Lk = 130, .D = 32, .Dv = 32, .causal = 1,
     .dtypes = TD_F32 | TD_F16},
    {"D1", SMALL, .Lq = 33, .Lk = 33, .D = 1, .Dv = 1},
    {"D256", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 33, .Lk = 33, .D = 256, .Dv = 256, .dtypes = TD_F32 | TD_F16},
    /* D = 256 over several 64-key tiles and two row tiles (the cuda warp-specialized kernel at
     * bucket 256), and D, Dv under 256 there (the copy engine's zero columns past D) */
    {"D256_causal_br_gqa_L200x330", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 330, .D = 256, .Dv = 256, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = F32_BF16},
    {"D160_Dv256_window_L130x150", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 130, .Lk = 150, .D = 160, .Dv = 256,
     .use_window = 1, .wl = 70, .wr = 10, .dtypes = TD_F16},
    /* the backward at bucket 256 with every element-wise option (cuda: bwd_wide_kernel.cuh's
     * kFull form, dQ fused): packed sequences, bias and dBias, dropout, softcap, D != Dv */
    {"D192_Dv200_varlen_bias_dropout_softcap", .B = 3, .Hq = 2, .Hkv = 1, .D = 192, .Dv = 200, .cu_q = cu_q3,
     .cu_k = cu_k3, .bias = 1, .dbias = 1, .dropout_p = 0.15, .seed = 21, .softcap = 4.0, .dtypes = TD_F32 | TD_F16},
    {"D24_Dv40", SMALL, .Lq = 17, .Lk = 33, .D = 24, .Dv = 40},
    {"D7_Dv5", SMALL, .Lq = 17, .Lk = 7, .D = 7, .Dv = 5},
    {"D64_L130_causal", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 130, .Lk = 130, .D = 64, .Dv = 64, .causal = 1,
     .dtypes = F32_BF16},
    {"gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16},
    {"mqa_causal", .B = 1, .Hq = 6, .Hkv = 1, .Lq = 33, .Lk = 33, .D = 16, .Dv = 8, .causal = 1},
    {"many_heads_gqa", .B = 3, .Hq = 8, .Hkv = 2, .Lq = 33, .Lk = 17, .D = 16, .Dv = 16, .dtypes = TD_F32 | TD_BF16},
    {"scale_custom", SMALL, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .scale = 0.3},
    /* a negative scale (the row maxima of the unscaled scores are then their minima: the cuda
     * warp-specialized forward, which folds the scale into the exponent, must leave it to another
     * kernel), multi-tile at D = 64 and 128, causal so that masked entries meet the sign */
    {"scale_negative_D128_causal", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 150, .D = 128, .Dv = 128, .causal = 1,
     .scale = -0.15, .dtypes = F32_BF16},
    {"scale_negative_D64", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 200, .Lk = 140, .D = 64, .Dv = 64, .scale = -0.2,
     .dtypes = TD_F16},

    /* ---- layouts ---- */
    {"layout_blhd_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .layout = TL_BLHD},
    {"layout_padded_mask_bias", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 33, .Lk = 17, .D = 16, .Dv = 24, .layout = TL_PADDED,
     .mask = 1, .bias = 1, .dbias = 1},
    {"layout_last_dim_stride2", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 17, .Lk = 33, .D = 16, .Dv = 8, .layout = TL_STRIDED,
     .bias = 1, .dbias = 1, .causal = 1},
    {"layout_blhd_causal_br", SMALL, .Lq = 33, .Lk = 65, .D = 8, .Dv = 8, .layout = TL_BLHD, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT},

    /* ---- causal, both alignments, Lq != Lk both ways ---- */
    {"causal_square", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .causal = 1},
    {"causal_tl_q_gt_k", SMALL, .Lq = 33, .Lk = 17, .D = 16, .Dv = 16, .causal = 1},
    {"causal_tl_q_lt_k", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .causal = 1},
    {"causal_br_q_gt_k", SMALL, .Lq = 33, .Lk = 17, .D = 16, .Dv = 16, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT}, /* first 16 rows see nothing */
    {"causal_br_q_lt_k", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT},

    /* ---- deterministic backward: a fixed summation order, checked against
     * ref here (test_backend's deterministic_backward checks the bits).
     * Several key tiles of 128 and query tiles of 64 / 128: on Hopper the
     * warp-specialized kernel's turns per query tile (bwd_ws_kernel.cuh). ---- */
    {"deterministic_causal_gqa_D64", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 300, .Lk = 300, .D = 64, .Dv = 64, .causal = 1,
     .deterministic = 1, .dtypes = F32_BF16},
    {"deterministic_D128_q_lt_k", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 200, .Lk = 520, .D = 128, .Dv = 128,
     .deterministic = 1, .dtypes = TD_F32 | TD_F16},
    {"deterministic_window_br_D128", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 300, .Lk = 290, .D = 128, .Dv = 128,
     .use_window = 1, .wl = 150, .wr = 30, .align = FA_ALIGN_BOTTOM_RIGHT, .deterministic = 1, .dtypes = F32_BF16},
    {"deterministic_D256_causal_gqa_alibi", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 150, .Lk = 170, .D = 256, .Dv = 256,
     .causal = 1, .alibi = 1, .deterministic = 1, .dtypes = F32_BF16},
    {"deterministic_causal_br_q_gt_k_D48_Dv64", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 330, .Lk = 270, .D = 48, .Dv = 64,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .deterministic = 1, .dtypes = TD_BF16 | TD_F16},

    /* ---- softcap and ALiBi alone over several tiles (cuda on Hopper: the warp-specialized
     * kernels' arithmetic options, score_arith.cuh; FLASHATTN_CUDA_WS=0 the per-element kernels):
     * both alignments, GQA, a window with offsets, a negative scale, bucket 256 (the forward's
     * warp-specialized kernel; the backward's wide kernel and dQ kernel, both modes, in their
     * arithmetic form), deterministic; half-precision only: f32 takes cuda's generic path, which other cases cover,
     * and the suite's time under TSan is CI's budget ---- */
    {"arith_softcap_alibi_causal_br_gqa_D64", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 300, .Lk = 270, .D = 64, .Dv = 64,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .softcap = 3.0, .mag = 2.0, .alibi = 1, .dtypes = TD_BF16},
    {"arith_alibi_window_offsets_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 330, .D = 128, .Dv = 128,
     .use_window = 1, .wl = 90, .wr = 20, .alibi = 1, .q_offset = 40, .k_offset = 7, .dtypes = TD_F16},
    {"arith_softcap_causal_tl_D128_scale_negative", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 150, .Lk = 260, .D = 128,
     .Dv = 128, .causal = 1, .softcap = 2.5, .mag = 2.0, .scale = -0.2, .dtypes = TD_BF16},
    {"arith_softcap_alibi_D256_causal_br", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 140, .Lk = 200, .D = 256, .Dv = 256,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .softcap = 4.0, .mag = 1.5, .alibi = 1, .dtypes = TD_F16},
    {"arith_softcap_window_offsets_D256_scale_negative", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 150, .Lk = 200, .D = 256,
     .Dv = 256, .use_window = 1, .wl = 60, .wr = 10, .softcap = 3.0, .mag = 2.0, .scale = -0.1, .q_offset = 20,
     .k_offset = 3, .dtypes = TD_BF16},
    {"deterministic_arith_softcap_gqa_D256", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 130, .Lk = 190, .D = 256, .Dv = 256,
     .softcap = 2.0, .mag = 2.0, .deterministic = 1, .dtypes = TD_F16},
    {"deterministic_arith_softcap_alibi_D128", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 200, .Lk = 300, .D = 128, .Dv = 128,
     .softcap = 3.0, .mag = 2.0, .alibi = 1, .deterministic = 1, .dtypes = TD_BF16},
    {"deterministic_arith_alibi_causal_D64", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 290, .Lk = 290, .D = 64, .Dv = 64,
     .causal = 1, .alibi = 1, .deterministic = 1, .dtypes = TD_F16},
    /* ---- dropout over several tiles, alone or with softcap and ALiBi (cuda on Hopper: the warp-specialized
     * kernels' keep bits, dropout_tile.cuh, where k_offset is a multiple of 4; otherwise, and with
     * FLASHATTN_CUDA_WS_DROP=0, the per-element kernels): both alignments, GQA, a window with offsets (aligned and
     * not), lengths, packed sequences, bucket 256 (the backward's wide kernel and dQ kernel), deterministic ---- */
    {"drop_causal_br_gqa_D64", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 300, .Lk = 270, .D = 64, .Dv = 64, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .dropout_p = 0.2, .seed = 41, .dtypes = TD_BF16},
    {"drop_softcap_alibi_window_offsets_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 330, .D = 128, .Dv = 128,
     .use_window = 1, .wl = 90, .wr = 20, .alibi = 1, .softcap = 3.0, .mag = 2.0, .q_offset = 40, .k_offset = 8,
     .dropout_p = 0.3, .seed = 42, .dtypes = TD_F16},
    {"drop_window_offsets_unaligned_D128", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 150, .Lk = 260, .D = 128, .Dv = 128,
     .use_window = 1, .wl = 70, .wr = 30, .q_offset = 21, .k_offset = 6, .dropout_p = 0.25, .seed = 43,
     .dtypes = TD_BF16},
    {"drop_varlen_D64", .B = 3, .Hq = 2, .Hkv = 1, .D = 64, .Dv = 64, .cu_q = cu_qt, .cu_k = cu_kt, .dropout_p = 0.25,
     .seed = 44, .dtypes = TD_BF16},
    {"drop_seqlens_causal_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 160, .Lk = 272, .D = 128, .Dv = 128,
     .seqlens_q = sq_tile, .seqlens_k = sk_tile, .causal = 1, .dropout_p = 0.1, .seed = 45, .dtypes = TD_F16},
    {"drop_causal_D256", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 140, .Lk = 200, .D = 256, .Dv = 256, .causal = 1,
     .dropout_p = 0.2, .seed = 46, .dtypes = TD_BF16},
    {"deterministic_drop_softcap_alibi_window_offsets_D256",
     .B = 1,
     .Hq = 4,
     .Hkv = 2,
     .Lq = 130,
     .Lk = 190,
     .D = 256,
     .Dv = 256,
     .use_window = 1,
     .wl = 60,
     .wr = 10,
     .softcap = 3.0,
     .mag = 2.0,
     .alibi = 1,
     .q_offset = 20,
     .k_offset = 12,
     .dropout_p = 0.25,
     .seed = 49,
     .deterministic = 1,
     .dtypes = TD_F16},
    {"deterministic_drop_gqa_D128", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 200, .Lk = 300, .D = 128, .Dv = 128,
     .dropout_p = 0.2, .seed = 47, .deterministic = 1, .dtypes = TD_BF16},
    {"deterministic_drop_causal_D64", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 290, .Lk = 290, .D = 64, .Dv = 64, .causal = 1,
     .dropout_p = 0.15, .seed = 48, .deterministic = 1, .dtypes = TD_F16},
    /* packed sequences over several tiles, deterministic (cuda on Hopper: the warp-specialized backward's dQ turns
     * per sequence, its tiles past a sequence zeroed) */
    {"deterministic_varlen_causal_br_gqa_D64", .B = 3, .Hq = 2, .Hkv = 1, .D = 64, .Dv = 64, .cu_q = cu_qt,
     .cu_k = cu_kt, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .deterministic = 1, .dtypes = TD_BF16},

    /* ---- one bias or mask over several tiles (cuda on Hopper: the warp-specialized forward copies it
     * tile by tile, score_tile.cuh, where its rows are
     * 16-byte aligned: Lk a multiple of 8 for a 16-bit bias, of 16 for a mask; FLASHATTN_CUDA_WS=0 the per-element
     * kernels), and the backward too (D = 64 and 128, without dBias): full, broadcast over batch or heads
     * (size 1 and stride 0), one row per sequence, -inf and fully masked rows, with the band, GQA, lengths, packed
     * sequences, softcap and ALiBi, bucket 256 (its backward reading the tensor from global memory),
     * deterministic ---- */
    {"tile_bias_gqa_D64", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 272, .D = 64, .Dv = 64, .bias = 1,
     .dtypes = TD_BF16},
    {"tile_bias_bcast_b_causal_br_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 140, .Lk = 272, .D = 128, .Dv = 128,
     .bias = 1, .bias_bcast = BC_B, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = TD_F16},
    {"tile_bias_keys_softcap_alibi_window_D128", .B = 2, .Hq = 1, .Hkv = 1, .Lq = 150, .Lk = 272, .D = 128, .Dv = 128,
     .bias = 1, .bias_bcast = BC_H | BC_Q, .softcap = 3.0, .mag = 2.0, .alibi = 1, .use_window = 1, .wl = 100, .wr = 40,
     .dtypes = TD_BF16},
    {"tile_bias_neginf_stride0_D256", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 140, .Lk = 208, .D = 256, .Dv = 256, .bias = 1,
     .bias_bcast = BC_H, .bias_stride0 = 1, .bias_neginf = 1, .dtypes = TD_F16},
    {"tile_bias_varlen_D64", .B = 3, .Hq = 2, .Hkv = 1, .D = 64, .Dv = 64, .cu_q = cu_qt, .cu_k = cu_kt, .bias = 1,
     .dtypes = TD_F16},
    /* dBias with the tile (cuda on Hopper: the wgmma dS kernel stores each element once where dBias sums over
     * no dim, the SIMT kernel otherwise): both alignments, GQA, softcap and ALiBi (dBias before the softcap's
     * derivative), packed sequences (zeros past each sequence), bucket 256 */
    {"tile_bias_dbias_causal_br_gqa_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 272, .D = 128, .Dv = 128,
     .bias = 1, .dbias = 1, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = TD_BF16},
    {"tile_bias_dbias_softcap_alibi_D256", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 140, .Lk = 200, .D = 256, .Dv = 256,
     .bias = 1, .dbias = 1, .softcap = 3.0, .mag = 2.0, .alibi = 1, .dtypes = TD_F16},
    {"tile_bias_dbias_varlen_D64", .B = 3, .Hq = 2, .Hkv = 1, .D = 64, .Dv = 64, .cu_q = cu_qt, .cu_k = cu_kt,
     .bias = 1, .dbias = 1, .dtypes = TD_BF16},
    /* dBias summed over the batch and / or the heads (cuda on Hopper: the summing kernel, one block a dBias
     * tile, the (b, h) pairs inside): lengths that differ per sequence (each pair's band and rows), packed
     * sequences, a stride-0 bias, softcap and ALiBi, a window, GQA, every bucket */
    {"tile_bias_bcast_b_dbias_seqlens_causal_br_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 160, .Lk = 272, .D = 128,
     .Dv = 128, .bias = 1, .bias_bcast = BC_B, .dbias = 1, .seqlens_q = sq_tile, .seqlens_k = sk_tile, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = TD_BF16},
    {"tile_bias_bcast_bh_dbias_varlen_softcap_alibi_D64", .B = 3, .Hq = 4, .Hkv = 2, .D = 64, .Dv = 64, .cu_q = cu_qt,
     .cu_k = cu_kt, .bias = 1, .bias_bcast = BC_B | BC_H, .bias_stride0 = 1, .dbias = 1, .softcap = 3.0, .mag = 2.0,
     .alibi = 1, .dtypes = TD_F16},
    {"tile_bias_bcast_h_dbias_window_D256", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 140, .Lk = 200, .D = 256, .Dv = 256,
     .bias = 1, .bias_bcast = BC_H, .dbias = 1, .use_window = 1, .wl = 70, .wr = 30, .dtypes = TD_BF16},
    /* a key bias ([B, 1, 1, Lk], [1, 1, 1, Lk]): dBias summed over the rows too */
    {"tile_bias_keys_dbias_causal_gqa_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 272, .D = 128, .Dv = 128,
     .bias = 1, .bias_bcast = BC_H | BC_Q, .dbias = 1, .causal = 1, .dtypes = TD_BF16},
    {"tile_bias_keys_all_dbias_seqlens_softcap_D64", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 160, .Lk = 272, .D = 64, .Dv = 64,
     .bias = 1, .bias_bcast = BC_B | BC_H | BC_Q, .dbias = 1, .seqlens_q = sq_tile, .seqlens_k = sk_tile,
     .softcap = 3.0, .mag = 2.0, .dtypes = TD_F16},
    /* the D = 256 backward reads the tensor from global memory (score_global.cuh): packed sequences (the
     * sequence's lengths bound its reads), with softcap and ALiBi, GQA */
    {"tile_bias_varlen_softcap_alibi_gqa_D256", .B = 3, .Hq = 2, .Hkv = 1, .D = 256, .Dv = 256, .cu_q = cu_qt,
     .cu_k = cu_kt, .bias = 1, .softcap = 3.0, .mag = 2.0, .alibi = 1, .dtypes = TD_BF16},
    {"tile_mask_dead_rows_D64", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 260, .Lk = 288, .D = 64, .Dv = 64, .mask = 1,
     .mask_dead_rows = 1, .dtypes = TD_BF16},
    {"tile_mask_keys_window_gqa_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 256, .D = 128, .Dv = 128, .mask = 1,
     .mask_bcast = BC_H | BC_Q, .use_window = 1, .wl = 60, .wr = 10, .dtypes = TD_F16},
    {"tile_mask_stride0_seqlens_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 160, .Lk = 272, .D = 128, .Dv = 128, .mask = 1,
     .mask_bcast = BC_B | BC_H, .mask_stride0 = 1, .seqlens_q = sq_tile, .seqlens_k = sk_tile, .dtypes = TD_BF16},
    /* bucket 256's 64-key tiles take a mask box (128 keys) in pairs: a window starting at an odd tile */
    {"tile_mask_dead_rows_window_D256", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 336, .D = 256, .Dv = 256, .mask = 1,
     .mask_dead_rows = 1, .use_window = 1, .wl = 50, .wr = 20, .dtypes = TD_BF16},
    {"tile_mask_keys_causal_br_D256", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 130, .Lk = 320, .D = 256, .Dv = 256, .mask = 1,
     .mask_bcast = BC_H | BC_Q, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .dtypes = TD_F16},
    {"deterministic_tile_bias_causal_D128", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 264, .D = 128, .Dv = 128,
     .bias = 1, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .deterministic = 1, .dtypes = TD_BF16},
    /* a bias or mask with dropout (cuda on Hopper: the tiles and the keep bits together, kScoreTileDrop; the D = 256
     * backward: the wide and dQ kernels' arithmetic form with the keep bits; dBias with dropout on the SIMT kernel) */
    {"tile_mask_keys_dropout_causal_gqa_D64", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 200, .Lk = 272, .D = 64, .Dv = 64,
     .mask = 1, .mask_bcast = BC_H | BC_Q, .causal = 1, .dropout_p = 0.2, .seed = 51, .dtypes = TD_BF16},
    {"tile_bias_dbias_dropout_softcap_alibi_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 272, .D = 128, .Dv = 128,
     .bias = 1, .dbias = 1, .softcap = 3.0, .mag = 2.0, .alibi = 1, .dropout_p = 0.3, .seed = 52, .dtypes = TD_F16},
    {"tile_mask_dropout_window_D256", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 200, .Lk = 336, .D = 256, .Dv = 256, .mask = 1,
     .use_window = 1, .wl = 90, .wr = 20, .dropout_p = 0.25, .seed = 53, .dtypes = TD_BF16},
    {"tile_bias_bcast_h_dbias_dropout_causal_gqa_D256", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 150, .Lk = 272, .D = 256,
     .Dv = 256, .bias = 1, .bias_bcast = BC_H, .dbias = 1, .causal = 1, .dropout_p = 0.2, .seed = 55, .dtypes = TD_F16},
    {"deterministic_tile_bias_dropout_seqlens_D128", .B = 2, .Hq = 2, .Hkv = 1, .Lq = 160, .Lk = 272, .D = 128,
     .Dv = 128, .bias = 1, .seqlens_q = sq_tile, .seqlens_k = sk_tile, .dropout_p = 0.2, .seed = 54, .deterministic = 1,
     .dtypes = TD_BF16},
    {"deterministic_tile_mask_D64", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 290, .Lk = 256, .D = 64, .Dv = 64, .mask = 1,
     .mask_dead_rows = 1, .deterministic = 1, .dtypes = TD_F16},

    /* ---- sliding windows ---- */
    {"window_left", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .use_window = 1, .wl = 5, .wr = -1},
    {"window_right", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .use_window = 1, .wl = -1, .wr = 3},
    {"window_both_br", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .use_window = 1, .wl = 4, .wr = 2,
     .align = FA_ALIGN_BOTTOM_RIGHT},
    {"window_both_tl_q_gt_k", SMALL, .Lq = 65, .Lk = 17, .D = 8, .Dv = 8, .use_window = 1, .wl = 3, .wr = 1},
    {"window_causal", SMALL, .Lq = 65, .Lk = 65, .D = 16, .Dv = 16, .causal = 1, .use_window = 1, .wl = 6, .wr = -1},
    {"window_diagonal_only", SMALL, .Lq = 17, .Lk = 17, .D = 8, .Dv = 8, .use_window = 1, .wl = 0, .wr = 0},
    {"window_br_dead_rows", SMALL, .Lq = 20, .Lk = 7, .D = 8, .Dv = 8, .use_window = 1, .wl = 1, .wr = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT},

    /* ---- padding (seqlens) ---- */
    {"seqlens_q_zero_len", .B = 3, .Hq = 2, .Hkv = 2, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .seqlens_q = sq_3},
    {"seqlens_k_zero_len", .B = 3, .Hq = 2, .Hkv = 2, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .seqlens_k = sk_3},
    {"seqlens_both_causal_br", .B = 3, .Hq = 2, .Hkv = 1, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .seqlens_q = sq_br,
     .seqlens_k = sk_br, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT},
    {"seqlens_all_keys_empty", SMALL, .Lq = 7, .Lk = 7, .D = 8, .Dv = 8, .seqlens_k = sk_none, .bias = 1, .dbias = 1},

    /* ---- packed variable-length (cu_seqlens) ---- */
    {"varlen_zero_len", .B = 4, .Hq = 2, .Hkv = 2, .D = 16, .Dv = 16, .cu_q = cu_q4, .cu_k = cu_k4},
    {"varlen_causal_br_gqa_blhd", .B = 3, .Hq = 4, .Hkv = 2, .D = 16, .Dv = 16, .cu_q = cu_q3, .cu_k = cu_k3,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .layout = TL_BLHD},
    {"varlen_mask_bias_dropout", .B = 3, .Hq = 2, .Hkv = 1, .D = 8, .Dv = 16, .cu_q = cu_q3, .cu_k = cu_k3, .mask = 1,
     .mask_bcast = BC_H, .bias = 1, .dbias = 1, .dropout_p = 0.2, .seed = 99},
    {"varlen_window_padded_view", .B = 2, .Hq = 2, .Hkv = 2, .D = 8, .Dv = 8, .cu_q = cu_q2, .cu_k = cu_k2,
     .use_window = 1, .wl = 9, .wr = 0, .layout = TL_PADDED},

    /* ---- boolean masks ---- */
    {"mask_full_dead_rows", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .mask = 1, .mask_dead_rows = 1},
    {"mask_bcast_heads", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .mask = 1,
     .mask_bcast = BC_H},
    {"mask_key_padding", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .mask = 1, .mask_bcast = BC_H | BC_Q},
    {"mask_stride0_bh", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .mask = 1, .mask_bcast = BC_B | BC_H,
     .mask_stride0 = 1, .mask_dead_rows = 1},
    {"mask_all_false", SMALL, .Lq = 7, .Lk = 17, .D = 8, .Dv = 8, .mask = 1, .mask_keep = 1e-12},
    {"mask_sparse_causal_window", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .mask = 1, .mask_keep = 0.3,
     .causal = 1, .use_window = 1, .wl = 8, .wr = -1},

    /* ---- additive bias ---- */
    {"bias_full_dbias", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .bias = 1, .dbias = 1},
    {"bias_bcast_batch_dbias", .B = 3, .Hq = 2, .Hkv = 2, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .bias = 1,
     .bias_bcast = BC_B, .dbias = 1},
    {"bias_key_dbias", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .bias = 1, .bias_bcast = BC_H | BC_Q, .dbias = 1},
    {"bias_stride0_dbias", .B = 2, .Hq = 4, .Hkv = 1, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .bias = 1,
     .bias_bcast = BC_B | BC_H, .bias_stride0 = 1, .dbias = 1},
    {"bias_neginf_rows", SMALL, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .bias = 1, .bias_neginf = 1, .dbias = 1},
    {"bias_no_dbias_causal", SMALL, .Lq = 33, .Lk = 17, .D = 16, .Dv = 16, .bias = 1, .causal = 1},

    /* ---- ALiBi, softcap ---- */
    {"alibi", .B = 2, .Hq = 4, .Hkv = 4, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .alibi = 1},
    {"alibi_causal_br_q_lt_k", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 65, .D = 16, .Dv = 16, .alibi = 1,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT},
    {"softcap", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .softcap = 5.0, .mag = 2.0},
    {"softcap_alibi_bias_gqa", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .softcap = 3.0,
     .mag = 1.5, .alibi = 1, .bias = 1, .dbias = 1},

    /* ---- dropout (fixed seed) ---- */
    {"dropout", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .dropout_p = 0.1, .seed = 1234},
    {"dropout_heavy_causal_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 65, .D = 16, .Dv = 16, .dropout_p = 0.6,
     .seed = 42, .causal = 1},
    {"dropout_seed64_offset", SMALL, .Lq = 7, .Lk = 33, .D = 8, .Dv = 8, .dropout_p = 0.3,
     .seed = 0x0123456789abcdefull, .offset = 7},

    /* ---- scores that overflow a naive exp ---- */
    {"large_scores_1e4", SMALL, .Lq = 33, .Lk = 33, .D = 16, .Dv = 16, .mag = 100.0},
    {"large_scores_causal_br", SMALL, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .mag = 100.0, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT},
    {"large_bias_shift_5000", SMALL, .Lq = 17, .Lk = 17, .D = 16, .Dv = 16, .bias = 1, .bias_shift = 5000.0,
     .dbias = 1},

    /* ---- tile sizes asked of the tiled backends ---- */
    {"blocks_3x5", SMALL, .Lq = 33, .Lk = 17, .D = 16, .Dv = 16, .causal = 1, .block_q = 3, .block_k = 5},
    {"blocks_1x1", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 7, .Lk = 9, .D = 8, .Dv = 8, .mask = 1, .block_q = 1, .block_k = 1},
    {"blocks_larger_than_L", SMALL, .Lq = 17, .Lk = 7, .D = 16, .Dv = 16, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT,
     .block_q = 256, .block_k = 512},
    {"blocks_16x32_L130", .B = 1, .Hq = 2, .Hkv = 2, .Lq = 130, .Lk = 130, .D = 32, .Dv = 32, .causal = 1,
     .use_window = 1, .wl = 40, .wr = -1, .block_q = 16, .block_k = 32, .dtypes = TD_F32},

    /* ---- L = 1 and Lk = 1 with every option ---- */
    {"L1_causal_tl", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8, .causal = 1},
    {"L1_causal_br_window", SMALL, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT,
     .use_window = 1, .wl = 0, .wr = 0},
    {"L1_softcap_alibi_bias_dbias", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8, .softcap = 2.0,
     .alibi = 1, .bias = 1, .dbias = 1},
    {"L1_mask_dropout", SMALL, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8, .mask = 1, .mask_keep = 0.5, .dropout_p = 0.3,
     .seed = 11},
    {"L1_seqlens", SMALL, .Lq = 1, .Lk = 1, .D = 8, .Dv = 8, .seqlens_q = s_one, .seqlens_k = sk_none},
    {"L1_varlen_everything", .B = 3, .Hq = 2, .Hkv = 1, .D = 8, .Dv = 8, .cu_q = cu_ones, .cu_k = cu_ones, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .mask = 1, .bias = 1, .dbias = 1, .alibi = 1, .softcap = 3.0, .dropout_p = 0.2,
     .seed = 3},
    {"Lk1_causal_br_q7_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 7, .Lk = 1, .D = 8, .Dv = 8, .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT, .bias = 1, .dbias = 1}, /* rows 0..5 see nothing, row 6 key 0 */
    {"Lk1_window_dropout_alibi", SMALL, .Lq = 5, .Lk = 1, .D = 8, .Dv = 8, .use_window = 1, .wl = 2, .wr = 0,
     .alibi = 1, .dropout_p = 0.4, .seed = 8},
    {"Lq1_Lk1_D256", .B = 1, .Hq = 1, .Hkv = 1, .Lq = 1, .Lk = 1, .D = 256, .Dv = 64, .dtypes = TD_F32 | TD_BF16},

    /* ---- a row whose only visible key is the last of a key tile ---- */
    {"diag_only_last_of_tile_16", SMALL, .Lq = 33, .Lk = 33, .D = 8, .Dv = 8, .use_window = 1, .wl = 0, .wr = 0,
     .block_q = 16, .block_k = 16}, /* rows 15, 31: key 15, 31 */
    {"diag_only_default_blocks", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 130, .Lk = 130, .D = 8, .Dv = 8, .causal = 1,
     .use_window = 1, .wl = 0, .dtypes = TD_F32 | TD_F16}, /* row bk - 1 sees key bk - 1 whatever bk is */
    {"seqlens_last_key_of_tile", .B = 2, .Hq = 2, .Hkv = 2, .Lq = 3, .Lk = 48, .D = 8, .Dv = 8, .seqlens_q = sq_last,
     .seqlens_k = sk_last, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .use_window = 1, .wl = 0,
     .block_k = 16}, /* the last row of each sequence sees key 15 / 47 alone */

    /* ---- scores of magnitude 1e4 with every transform ---- */
    {"large_scores_1e4_everything", .B = 1, .Hq = 4, .Hkv = 2, .Lq = 17, .Lk = 33, .D = 16, .Dv = 16, .mag = 100.0,
     .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .mask = 1, .bias = 1, .dbias = 1, .alibi = 1, .dropout_p = 0.1,
     .seed = 21, .dtypes = TD_F32 | TD_F64},

    /* ---- position offsets: one block of a ring / context-parallel attention ---- */
    {"offsets_alibi_causal_tl_gqa", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 33, .Lk = 40, .D = 16, .Dv = 16, .alibi = 1,
     .causal = 1, .q_offset = 64, .k_offset = 37}, /* odd k_offset: Philox groups straddle the block's start */
    {"offsets_dropout_window_br", SMALL, .Lq = 17, .Lk = 65, .D = 16, .Dv = 16, .dropout_p = 0.3, .seed = 4242,
     .offset = 2, .causal = 1, .align = FA_ALIGN_BOTTOM_RIGHT, .use_window = 1, .wl = 30, .q_offset = 1000,
     .k_offset = 999},
    {"offsets_block_below_diag_dropout_alibi", SMALL, .Lq = 32, .Lk = 32, .D = 16, .Dv = 16, .causal = 1, .alibi = 1,
     .dropout_p = 0.2, .seed = 9, .q_offset = 96, .k_offset = 33}, /* every key visible */
    {"offsets_block_above_diag", SMALL, .Lq = 32, .Lk = 32, .D = 8, .Dv = 8, .causal = 1, .q_offset = 0,
     .k_offset = 64}, /* nothing visible: O = 0, LSE = -inf */
    {"offsets_varlen_alibi_dropout", .B = 3, .Hq = 2, .Hkv = 1, .D = 8, .Dv = 16, .cu_q = cu_q3, .cu_k = cu_k3,
     .causal = 1, .alibi = 1, .dropout_p = 0.25, .seed = 31, .q_offset = 5, .k_offset = 2},
    {"offsets_decode_shape_alibi_causal", .B = 2, .Hq = 4, .Hkv = 2, .Lq = 2, .Lk = 300, .D = 32, .Dv = 16, .causal = 1,
     .alibi = 1, .q_offset = 500, .k_offset = 201}, /* the shape the decode pass takes at offsets 0 */
    {"offsets_L130_window_alibi_dropout", .B = 1, .Hq = 2, .Hkv = 1, .Lq = 130, .Lk = 130, .D = 32, .Dv = 32,
     .use_window = 1, .wl = 70, .wr = 10, .alibi = 1, .dropout_p = 0.1, .seed = 5, .q_offset = 260, .k_offset = 195,
     .dtypes = TD_F32 | TD_BF16},
    {"offsets_huge", SMALL, .Lq = 9, .Lk = 17, .D = 8, .Dv = 8, .causal = 1, .alibi = 1, .dropout_p = 0.3, .seed = 3,
     .use_window = 1, .wl = 1000000, .q_offset = (int64_t)1 << 60, .k_offset = ((int64_t)1 << 60) - 10},

    /* ---- everything at once ---- */
    {"everything",
     .B = 2,
     .Hq = 4,
     .Hkv = 2,
     .Lq = 33,
     .Lk = 65,
     .D = 16,
     .Dv = 24,
     .layout = TL_BLHD,
     .seqlens_q = sq_ev,
     .seqlens_k = sk_ev,
     .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT,
     .use_window = 1,
     .wl = 20,
     .wr = -1,
     .mask = 1,
     .mask_bcast = BC_H,
     .bias = 1,
     .bias_bcast = BC_B,
     .dbias = 1,
     .alibi = 1,
     .softcap = 4.0,
     .dropout_p = 0.25,
     .seed = 7,
     .offset = 3},
    {"everything_L130", .B = 1,
     .Hq = 4,           .Hkv = 1,
     .Lq = 130,         .Lk = 130,
     .D = 32,           .Dv = 16,
     .causal = 1,       .use_window = 1,
     .wl = 70,          .wr = -1,
     .mask = 1,         .mask_bcast = BC_H,
     .bias = 1,         .bias_bcast = BC_B,
     .dbias = 1,        .alibi = 1,
     .softcap = 8.0,    .dropout_p = 0.1,
     .seed = 77,        .dtypes = TD_F32 | TD_BF16},
    {"everything_varlen_padded_view", .B = 3, .Hq = 4, .Hkv = 1, .D = 8, .Dv = 16, .cu_q = cu_q3, .cu_k = cu_k3,
     .layout = TL_PADDED, .causal = 1, .mask = 1, .mask_dead_rows = 1, .bias = 1, .bias_bcast = BC_Q, .dbias = 1,
     .alibi = 1, .softcap = 6.0, .dropout_p = 0.15, .seed = 5},
    {"everything_offsets",
     .B = 2,
     .Hq = 4,
     .Hkv = 2,
     .Lq = 33,
     .Lk = 65,
     .D = 16,
     .Dv = 24,
     .layout = TL_BLHD,
     .seqlens_q = sq_ev,
     .seqlens_k = sk_ev,
     .causal = 1,
     .align = FA_ALIGN_BOTTOM_RIGHT,
     .use_window = 1,
     .wl = 20,
     .mask = 1,
     .mask_bcast = BC_H,
     .bias = 1,
     .bias_bcast = BC_B,
     .dbias = 1,
     .alibi = 1,
     .softcap = 4.0,
     .dropout_p = 0.25,
     .seed = 7,
     .offset = 3,
     .q_offset = 130,
     .k_offset = 67},
};

const int tc_ncases = (int)(sizeof tc_cases / sizeof tc_cases[0]);
