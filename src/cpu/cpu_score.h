/* The score transform and the masks, applied to one tile of scores: the
 * rules of src/rules (score.h, visibility.h, dropout.h) evaluated element
 * by element where a tile needs them, and skipped where it does not. */
#ifndef FA_CPU_SCORE_H
#define FA_CPU_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "kernels.h"
#include "rules/visibility.h"

/* Where a tile of scores sits: sequence b (masks, biases and dropout index
 * by it), query head h, query rows i0 .. i0+br-1 and keys j0 .. j0+bc-1
 * (positions inside the sequence). */
typedef struct fa__cpu_tile {
  const fa__problem *p;
  const fa__band *bd;
  int64_t b, h;
  int64_t i0, j0;
  int br, bc;
  /* NULL, or one value per query row that the tile's scores come out
   * minus, in two parts (row_off_lo may be NULL): s = x + (bias - row_off)
   * - row_off_lo. A large bias and a large offset (the row's LSE, or a
   * reference score) cancel exactly before the small q.k part is added:
   * f32 scores of ~5000 otherwise carry 2.4e-4 of rounding into exp(). The
   * small second part carries a correction an f32 LSE cannot hold. */
  const float *row_off, *row_off_lo;
} fa__cpu_tile;

/* Does the problem transform scores beyond the scale (softcap, ALiBi,
 * bias) or mask them element by element (boolean mask)? */
int fa__cpu_score_elementwise(const fa__problem *p);

/* Turns scale * q.k (already in s) into the score of DESIGN.md (minus
 * t->row_off when given), and -inf where the element is not visible. Element (ii, jj) of the tile lives at
 * s[ii*si + jj*sj]; one of si, sj is 1. band_full: the tile lies inside the
 * band (fa__band_tile_full), so only the boolean mask can hide elements.
 * capped (same layout, may be NULL) receives softcap(scale * q.k) for the
 * softcap gradient. */
void fa__cpu_score_tile(const fa__cpu_kernels *kt, const fa__cpu_tile *t, float *s, ptrdiff_t si, ptrdiff_t sj,
                        float *capped, int band_full);

/* keep[ii*ki + jj*kj] = 1 if dropout keeps element (ii, jj) of the tile
 * (kt->dropout, the rule of src/rules/dropout.h). */
void fa__cpu_dropout_mask(const fa__cpu_kernels *kt, const fa__cpu_tile *t, uint8_t *keep, ptrdiff_t ki, ptrdiff_t kj);

#endif
