/* ref fa_forward_kvcache, the definition of docs/semantics.md ("KV cache"):
 * append k_new/v_new (rotated) at cache_seqlens[b], then for each query row
 * (rotated at position cache_seqlens[b] + i) the textbook softmax over the
 * cache_seqlens[b] + L_new keys, bottom-right aligned, in float64. */
#include <math.h>
#include <stdlib.h>

#include "../core/element.h"
#include "../core/kv_host.h"
#include "../rules/rotary.h"
#include "../rules/score.h"
#include "../rules/visibility.h"
#include "ref_internal.h"
#include "ref_io.h"

fa_status fa__ref_forward_kvcache(const fa__problem *p, fa__err *err) {
  const fa__kv *kv = &p->kv;
  /* a row of scores for the longest sequence, not the capacity: a cache
   * can describe far more keys (stride 0, or many small pages) than any
   * sequence holds */
  int64_t keys = 0;
  for (int64_t b = 0; b < p->B; ++b)
    if (fa__kv_len(p, b) > keys) keys = fa__kv_len(p, b);
  double *s = (double *)malloc((size_t)(keys + p->D + p->Dv) * sizeof(double));
  if (!s) {
    fa__err_set(err, "ref: cannot allocate a row of %lld scores", (long long)keys);
    return FA_ERR_OUT_OF_MEMORY;
  }
  double *q = s + keys, *acc = q + p->D;
  fa__kv_append_host(p);
  const int64_t half = kv->rotary_dim / 2;
  for (int64_t b = 0; b < p->B; ++b) {
    const int64_t lk = fa__kv_len(p, b);
    fa__band bd = {p->Lq, lk, p->window_left, p->window_right, lk - p->Lq};
    for (int64_t h = 0; h < p->Hq; ++h) {
      const int64_t kvh = h / p->group;
      const double slope = p->alibi_slopes ? (double)p->alibi_slopes[h] : 0.0;
      for (int64_t i = 0; i < p->Lq; ++i) {
        for (int64_t d = 0; d < p->D; ++d) q[d] = fa__ref_load(&p->q, b, h, i, d);
        if (kv->rotary_cos) {
          const int64_t pos = (int64_t)kv->cache_seqlens[b] + i;
          fa__rotary_d(q, kv->rotary_dim, kv->rotary_interleaved, kv->rotary_cos + pos * half,
                       kv->rotary_sin + pos * half);
        }
        double mx = -INFINITY;
        for (int64_t j = 0; j < lk; ++j) {
          s[j] = -INFINITY;
          if (!fa__band_visible(&bd, i, j)) continue;
          const fa__kvpos at = fa__kv_locate(&kv->map, b, j);
          double dot = 0.0;
          for (int64_t d = 0; d < p->D; ++d)
            dot += q[d] * fa__elem_get(p->k.data, p->dtype, fa__kv_offset(p->k.stride, at, kvh, d));
          s[j] = fa__score_d(dot, p->scale, p->softcap, p->alibi_slopes != NULL, slope, fa__band_diag(&bd, i), j, 0.0);
          if (s[j] > mx || isnan(s[j])) mx = s[j];
        }
        double sum = 0.0;
        for (int64_t e = 0; e < p->Dv; ++e) acc[e] = 0.0;
        if (mx != -INFINITY)
          for (int64_t j = 0; j < lk; ++j) {
            if (s[j] == -INFINITY) continue;
            const double w = exp(s[j] - mx);
            sum += w;
            const fa__kvpos at = fa__kv_locate(&kv->map, b, j);
            for (int64_t e = 0; e < p->Dv; ++e)
              acc[e] += w * fa__elem_get(p->v.data, p->dtype, fa__kv_offset(p->v.stride, at, kvh, e));
          }
        for (int64_t e = 0; e < p->Dv; ++e) fa__ref_store(&p->o, b, h, i, e, sum > 0 ? acc[e] / sum : 0.0);
        if (p->lse.data) fa__ref_store(&p->lse, b, h, i, 0, sum > 0 ? mx + log(sum) : -INFINITY);
      }
    }
  }
  free(s);
  return FA_OK;
}
