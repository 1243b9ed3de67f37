/* Visibility: may query row i of a sequence see key column j?
 *
 *   diag(i) = i                 top-left alignment (PyTorch is_causal)
 *   diag(i) = i + Lk_b - Lq_b   bottom-right alignment (FlashAttention >= 2.1)
 *   visible(i, j) = i < Lq_b and j < Lk_b
 *               and (left  < 0 or j >= diag(i) - left)
 *               and (right < 0 or j <= diag(i) + right)
 *               and (no boolean mask, or mask[b, h, i, j])
 *
 * The boolean mask is applied by the caller (it is a tensor read); the band
 * rule lives here, together with the column range a row can see, which the
 * tiled backends use to skip whole tiles. */
#ifndef FA_RULES_VISIBILITY_H
#define FA_RULES_VISIBILITY_H

#include <stdint.h>

#include "hd.h"

/* The band of one sequence: lengths and window, causal already folded in. */
typedef struct fa__band {
  int64_t lq, lk;     /* actual lengths of this sequence */
  int64_t left;       /* < 0: unbounded */
  int64_t right;      /* < 0: unbounded */
  int64_t diag_shift; /* 0 (top-left) or lk - lq (bottom-right) */
} fa__band;

FA_HD int64_t fa__band_diag(const fa__band *bd, int64_t i) {
  return i + bd->diag_shift;
}

/* Band rule only (no boolean mask). */
FA_HD int fa__band_visible(const fa__band *bd, int64_t i, int64_t j) {
  if (i < 0 || i >= bd->lq || j < 0 || j >= bd->lk) return 0;
  const int64_t d = fa__band_diag(bd, i);
  if (bd->left >= 0 && j < d - bd->left) return 0;
  if (bd->right >= 0 && j > d + bd->right) return 0;
  return 1;
}

/* Columns [*j0, *j1) that rows [i0, i1) can see at most (the union of their
 * bands, clipped to [0, lk)). Empty when *j0 >= *j1. Tiles outside it are
 * never computed. */
FA_HD void fa__band_cols(const fa__band *bd, int64_t i0, int64_t i1, int64_t *j0, int64_t *j1) {
  int64_t lo = 0, hi = bd->lk;
  if (i1 > bd->lq) i1 = bd->lq;
  if (i0 >= i1) {
    *j0 = 0;
    *j1 = 0;
    return;
  }
  if (bd->left >= 0) {
    const int64_t l = fa__band_diag(bd, i0) - bd->left;
    if (l > lo) lo = l;
  }
  if (bd->right >= 0) {
    const int64_t r = fa__band_diag(bd, i1 - 1) + bd->right + 1;
    if (r < hi) hi = r;
  }
  *j0 = lo;
  *j1 = hi > lo ? hi : lo;
}

/* Rows [*i0, *i1) that columns [j0, j1) are seen by at most (the backward
 * walks Q tiles per K/V tile). */
FA_HD void fa__band_rows(const fa__band *bd, int64_t j0, int64_t j1, int64_t *i0, int64_t *i1) {
  int64_t lo = 0, hi = bd->lq;
  if (j1 > bd->lk) j1 = bd->lk;
  if (j0 >= j1) {
    *i0 = 0;
    *i1 = 0;
    return;
  }
  /* j <= i + shift + right  <=>  i >= j - shift - right */
  if (bd->right >= 0) {
    const int64_t l = j0 - bd->diag_shift - bd->right;
    if (l > lo) lo = l;
  }
  /* j >= i + shift - left  <=>  i <= j - shift + left */
  if (bd->left >= 0) {
    const int64_t r = (j1 - 1) - bd->diag_shift + bd->left + 1;
    if (r < hi) hi = r;
  }
  *i0 = lo;
  *i1 = hi > lo ? hi : lo;
}

/* Is every element of the tile [i0,i1) x [j0,j1) inside the band? Then the
 * tile needs no element-wise band mask (a boolean mask may still apply). */
FA_HD int fa__band_tile_full(const fa__band *bd, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (i1 > bd->lq || j1 > bd->lk) return 0;
  if (bd->left >= 0 && j0 < fa__band_diag(bd, i1 - 1) - bd->left) return 0;
  if (bd->right >= 0 && j1 - 1 > fa__band_diag(bd, i0) + bd->right) return 0;
  return 1;
}

#endif
