/* A case made concrete: its inputs as numbers (rounded to the dtype it runs
 * in), the tensors a backend is called with (any dtype, layout and memory),
 * and the visibility rule written out again from DESIGN.md, independently
 * of src/rules, for the checks that must hold exactly. */
#ifndef FA_TEST_PROBLEM_H
#define FA_TEST_PROBLEM_H

#include <stdint.h>

#include "../cases.h"
#include "tensor.h"

/* Sizes of a case, packed or padded alike. */
typedef struct tc_geom {
  int varlen;
  int64_t nseq; /* sequences (B, or num_seqs when packed) */
  int64_t Bt;   /* dim 0 of the tensors (1 when packed) */
  int64_t Hq, Hkv, group, D, Dv;
  int64_t rows_q, rows_k; /* dim 2 of q / k (total tokens when packed) */
  int64_t mq, mk;         /* logical Lq, Lk of mask and bias */
} tc_geom;

void tc_geom_of(const tcase *c, tc_geom *g);
/* actual lengths of sequence b */
int64_t tc_lq(const tcase *c, int64_t b);
int64_t tc_lk(const tcase *c, int64_t b);
/* tensor (dim 0, dim 2) of position i of sequence b */
void tc_qpos(const tcase *c, int64_t b, int64_t i, int64_t *bidx, int64_t *row);
void tc_kpos(const tcase *c, int64_t b, int64_t j, int64_t *bidx, int64_t *row);

/* The inputs of a case in one dtype, as exact doubles (already rounded to
 * that dtype), each in the natural order of its tensor's logical shape. */
typedef struct tc_inputs {
  const tcase *c;
  fa_dtype dt;
  tc_geom g;
  double *q, *k, *v, *dout;
  int64_t mshape[4]; /* the mask's stored shape (broadcast dims 1) */
  uint8_t *mask;
  int64_t bshape[4];
  double *bias;
  float *alibi; /* [Hq] */
} tc_inputs;

void tc_inputs_make(tc_inputs *in, const tcase *c, fa_dtype dt, uint64_t seed);
void tc_inputs_free(tc_inputs *in);
/* mask / bias at logical (b, h, i, j) of [nseq, Hq, mq, mk] */
int tc_mask_at(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j);
double tc_bias_at(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j);

/* DESIGN.md's visibility, plus "a -inf bias counts as masked". */
int tc_visible(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j);

/* The tensors of one call. */
typedef struct tc_tensors {
  tbuf q, k, v, o, lse, dout, dq, dk, dv, mask, bias, dbias;
  fa_options opt;
  void *dev[5]; /* device copies of seqlens, cu_seqlens, alibi slopes */
} tc_tensors;

/* Builds them in dtype dt and layout, on the device when on_device;
 * inputs filled, outputs poisoned, everything uploaded. lse is f64 when dt
 * is, else f32. 0 on success, -1 if device memory could not be had. */
int tc_tensors_make(tc_tensors *T, const tc_inputs *in, fa_dtype dt, tb_layout layout, int on_device);
void tc_tensors_free(tc_tensors *T);
/* dbias to pass (NULL when the case does not ask for it). */
static inline fa_tensor *tc_dbias_arg(tc_tensors *T) {
  return tb_present(&T->dbias) ? &T->dbias.t : NULL;
}

/* DESIGN.md's score of element (b, h, i, j) with this scale (softcap,
 * ALiBi, bias), -inf where not visible. */
double tc_score(const tc_inputs *in, int64_t b, int64_t h, int64_t i, int64_t j, double scale);

/* The textbook forward, written for the tests alone: O and LSE in the
 * natural order of o [Bt, Hq, rows_q, Dv] and lse [Bt, Hq, rows_q]. */
void tc_naive_forward(const tc_inputs *in, double *o, double *lse);

#endif
