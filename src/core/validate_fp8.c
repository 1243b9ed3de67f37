/* fa_forward's checks that only the FP8 (e4m3) forward has: which dtypes go
 * together, which options it refuses, and the descale tensors. Called by
 * fa__problem_build (validate.c); the rule itself is in docs/semantics.md,
 * "FP8 (e4m3)". */
#include "validate_fp8.h"

#include "checks.h"

static int has_descale(const fa_options *o) {
  return o->q_descale.data || o->k_descale.data || o->v_descale.data;
}

fa_status fa__fp8_check_call(const fa__call *c, const fa_options *o, fa__err *err) {
  if (c->q->dtype != FA_F8_E4M3) {
    /* descales scale e4m3 inputs; on any other dtype they would be ignored */
    const char *name = o->q_descale.data ? "opt->q_descale" : o->k_descale.data ? "opt->k_descale" : "opt->v_descale";
    if (has_descale(o))
      FAIL(FA_ERR_OPTION, "%s is given but q->dtype = %s: descale factors go with e4m3 inputs only", name,
           fa_dtype_name(c->q->dtype));
    return FA_OK;
  }
  if (c->pass == FA__BACKWARD)
    FAIL(FA_ERR_DTYPE, "q->dtype = e4m3: the FP8 attention has a forward only (fa_backward takes f32, f64, f16, bf16)");
  if (c->k->dtype != FA_F8_E4M3) FAIL(FA_ERR_DTYPE, "k->dtype = %s, expected e4m3 as q's", fa_dtype_name(c->k->dtype));
  if (c->v->dtype != FA_F8_E4M3) FAIL(FA_ERR_DTYPE, "v->dtype = %s, expected e4m3 as q's", fa_dtype_name(c->v->dtype));
  if (c->o->dtype != FA_BF16 && c->o->dtype != FA_F16)
    FAIL(FA_ERR_DTYPE, "o->dtype = %s: the FP8 forward writes o in bf16 or f16", fa_dtype_name(c->o->dtype));
  if (o->mask.data) FAIL(FA_ERR_OPTION, "opt->mask is given: the FP8 forward takes no boolean mask");
  if (o->bias.data) FAIL(FA_ERR_OPTION, "opt->bias is given: the FP8 forward takes no additive bias");
  if (o->dropout_p != 0)
    FAIL(FA_ERR_OPTION, "opt->dropout_p = %g: the FP8 forward has no dropout (inference only)", o->dropout_p);
  return FA_OK;
}

/* One descale tensor: f32, [B, Hkv] with broadcasting; dims 2 and 3 are
 * made size 1 (not read) so that the shared checks see a 4-d tensor. */
static fa_status check_one(fa_tensor *t, const char *name, int64_t B, int64_t Hkv, fa__extent *e, fa__err *err) {
  if (!t->data) return FA_OK;
  if (t->dtype != FA_F32) FAIL(FA_ERR_DTYPE, "%s->dtype = %s, expected f32", name, fa_dtype_name(t->dtype));
  t->shape[2] = t->shape[3] = 1;
  t->stride[2] = t->stride[3] = 0;
  CHECK(fa__need_sizes(t, name, 2, err));
  const int64_t logical[4] = {B, Hkv, 1, 1};
  CHECK(fa__broadcastable(t, name, logical, err));
  CHECK(fa__extent_of(t, name, 4, e, err));
  return FA_OK;
}

fa_status fa__fp8_descales(fa__problem *p, fa_tensor *qd, fa_tensor *kd, fa_tensor *vd, fa__extent *ins, int *ni,
                           fa__err *err) {
  fa_tensor *ts[3] = {qd, kd, vd};
  const char *names[3] = {"opt->q_descale", "opt->k_descale", "opt->v_descale"};
  fa_tensor *outs[3] = {&p->q_descale, &p->k_descale, &p->v_descale};
  for (int i = 0; i < 3; ++i) {
    if (!ts[i]->data) continue;
    CHECK(check_one(ts[i], names[i], p->B, p->Hkv, &ins[*ni], err));
    ++*ni;
    *outs[i] = *ts[i];
  }
  return FA_OK;
}
