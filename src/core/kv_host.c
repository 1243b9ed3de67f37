#include "kv_host.h"

#include <math.h>
#include <stdlib.h>

#include "../rules/online_softmax.h"
#include "../rules/rotary.h"
#include "element.h"

void fa__kv_append_host(const fa__problem *p) {
  const fa__kv *kv = &p->kv;
  if (kv->L_new == 0) return;
  double row[1024];
  double *x = p->D <= 1024 ? row : (double *)malloc((size_t)p->D * sizeof(double));
  if (!x) return; /* D > 1024 and no memory: cannot happen for real head dims */
  const int64_t half = kv->rotary_dim / 2;
  for (int64_t b = 0; b < p->B; ++b)
    for (int64_t h = 0; h < p->Hkv; ++h)
      for (int64_t t = 0; t < kv->L_new; ++t) {
        const int64_t pos = (int64_t)kv->cache_seqlens[b] + t;
        const fa__kvpos at = fa__kv_locate(&kv->map, b, pos);
        for (int64_t d = 0; d < p->D; ++d)
          x[d] = fa__elem_get(kv->k_new.data, kv->k_new.dtype, fa__elem_offset(&kv->k_new, b, h, t, d));
        if (kv->rotary_cos)
          fa__rotary_d(x, kv->rotary_dim, kv->rotary_interleaved, kv->rotary_cos + pos * half,
                       kv->rotary_sin + pos * half);
        for (int64_t d = 0; d < p->D; ++d)
          fa__elem_set(p->k.data, p->k.dtype, fa__kv_offset(p->k.stride, at, h, d), x[d]);
        for (int64_t d = 0; d < p->Dv; ++d)
          fa__elem_set(p->v.data, p->v.dtype, fa__kv_offset(p->v.stride, at, h, d),
                       fa__elem_get(kv->v_new.data, kv->v_new.dtype, fa__elem_offset(&kv->v_new, b, h, t, d)));
      }
  if (x != row) free(x);
}

fa_status fa__merge_host(int n, const fa_tensor *o_parts, const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse,
                         fa__err *err) {
  double *lv = (double *)malloc((size_t)n * 2 * sizeof(double));
  if (!lv) {
    fa__err_set(err, "fa_merge_states: cannot allocate %d doubles", 2 * n);
    return FA_ERR_OUT_OF_MEMORY;
  }
  double *w = lv + n;
  for (int64_t b = 0; b < o->shape[0]; ++b)
    for (int64_t h = 0; h < o->shape[1]; ++h)
      for (int64_t i = 0; i < o->shape[2]; ++i) {
        for (int k = 0; k < n; ++k)
          lv[k] = fa__elem_get(lse_parts[k].data, lse_parts[k].dtype, fa__elem_offset(&lse_parts[k], b, h, i, 0));
        const double m = fa__osm_merge_lse(lv, n, w);
        for (int64_t e = 0; e < o->shape[3]; ++e) {
          double acc = 0.0;
          for (int k = 0; k < n; ++k)
            if (w[k] != 0.0 || isnan(w[k]))
              acc += w[k] * fa__elem_get(o_parts[k].data, o_parts[k].dtype, fa__elem_offset(&o_parts[k], b, h, i, e));
          fa__elem_set(o->data, o->dtype, fa__elem_offset(o, b, h, i, e), acc);
        }
        if (lse && lse->data) fa__elem_set(lse->data, lse->dtype, fa__elem_offset(lse, b, h, i, 0), m);
      }
  free(lv);
  return FA_OK;
}
