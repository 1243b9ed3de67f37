/* flashattn trace: the online softmax of one query row, one tile at a time,
 * with the library's own update rule (src/rules/online_softmax.h), next to
 * the one-shot softmax it must equal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "flashattn.h"
#include "rules/online_softmax.h"

#define MAX_KEYS 64

static void help(void) {
  printf(
      "usage: flashattn trace [--tile N] [--scores s1,s2,..] [--values v1,v2,..] [--merge]\n"
      "\n"
      "Steps through the online softmax (FlashAttention's core) for one query row:\n"
      "the scores s_j = q.k_j of its keys arrive one tile of keys at a time, and\n"
      "the row keeps only three numbers (plus one accumulator per output dim):\n"
      "  m   = the largest score seen so far\n"
      "  l   = sum of exp(s_j - m) over the keys seen\n"
      "  acc = sum of exp(s_j - m) * v_j\n"
      "When a tile raises the max from m to m', the old l and acc are multiplied\n"
      "by exp(m - m'). At the end o = acc / l and lse = m + log(l): exactly the\n"
      "softmax-weighted sum of the values, without ever holding all scores.\n"
      "\n"
      "  --tile N         keys per tile (default 2)\n"
      "  --scores LIST    the row's scores (default 1,2,3); -inf = a masked key\n"
      "  --values LIST    one value per key (default 10,20,40)\n"
      "  --merge          also: each tile on its own, then the partial states merged\n"
      "                   (how split-K / flash-decoding combine work from several threads),\n"
      "                   and the tiles as partial results through fa_merge_states\n"
      "\n"
      "example: flashattn trace --tile 1 --scores 0,2,1,3 --values 1,2,3,4\n");
}

static void print_list(const char *name, const double *x, int n) {
  printf("%s[", name);
  for (int i = 0; i < n; ++i) printf("%s%.6g", i ? ", " : "", x[i]);
  printf("]");
}

static void print_state(const char *prefix, double m, double l, double acc) {
  printf("%sm = %-10.6g l = %-10.6g acc = %.6g\n", prefix, m, l, acc);
}

/* The textbook softmax: all scores at once. */
static void one_shot(const double *s, const double *v, int n, double *o, double *lse, double *p) {
  double mx = -INFINITY, sum = 0, acc = 0;
  for (int j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  for (int j = 0; j < n; ++j) sum += p[j] = mx == -INFINITY ? 0 : exp(s[j] - mx);
  for (int j = 0; j < n; ++j) p[j] = sum > 0 ? p[j] / sum : 0, acc += p[j] * v[j];
  *o = acc;
  *lse = sum > 0 ? mx + log(sum) : -INFINITY;
}

static void trace_merge(const double *s, const double *v, int n, int tile) {
  printf("\nsplit: each tile alone (as separate threads would), then merged left to right\n");
  fa__osm total = fa__osm_init();
  double total_acc = 0, p[MAX_KEYS];
  for (int t0 = 0, k = 1; t0 < n; t0 += tile, ++k) {
    const int nt = n - t0 < tile ? n - t0 : tile;
    fa__osm part = fa__osm_init();
    fa__osm_update(&part, s + t0, nt, p);
    double acc = 0;
    for (int j = 0; j < nt; ++j) acc += p[j] * v[t0 + j];
    printf("  tile %d alone:   ", k);
    print_state("", part.m, part.l, acc);
    double wa, wb;
    const fa__osm merged = fa__osm_merge(total, part, &wa, &wb);
    total_acc = total_acc * wa + acc * wb;
    printf("  merged so far: weights exp(m_a - m) = %.6g, exp(m_b - m) = %.6g\n  %15s", wa, wb, "");
    print_state("", merged.m, merged.l, total_acc);
    total = merged;
  }
  printf("  merged o = acc / l = %.6g\n", total_acc * fa__osm_inv_l(&total));

  /* The same merge through the public call: each tile as a finished partial
   * result (o_k = acc_k / l_k, lse_k = m_k + log l_k), as split-KV, ring
   * attention or a cache's shared prefix hand them over. */
  printf("\nthrough fa_merge_states: each tile as a partial result (o_k, lse_k)\n");
  double o_parts[MAX_KEYS], lse_parts[MAX_KEYS];
  fa_tensor to[MAX_KEYS], tl[MAX_KEYS];
  int nparts = 0;
  for (int t0 = 0; t0 < n; t0 += tile, ++nparts) {
    const int nt = n - t0 < tile ? n - t0 : tile;
    fa__osm part = fa__osm_init();
    fa__osm_update(&part, s + t0, nt, p);
    double acc = 0;
    for (int j = 0; j < nt; ++j) acc += p[j] * v[t0 + j];
    o_parts[nparts] = acc * fa__osm_inv_l(&part);
    lse_parts[nparts] = fa__osm_lse(&part);
    to[nparts] = fa_tensor_contiguous(&o_parts[nparts], FA_F64, 1, 1, 1, 1);
    tl[nparts] = fa_tensor_contiguous(&lse_parts[nparts], FA_F64, 1, 1, 1, 1);
    printf("  part %d: o = %.6g  lse = %.6g\n", nparts + 1, o_parts[nparts], lse_parts[nparts]);
  }
  double o = NAN, lse = NAN;
  fa_tensor tout = fa_tensor_contiguous(&o, FA_F64, 1, 1, 1, 1), tlse = fa_tensor_contiguous(&lse, FA_F64, 1, 1, 1, 1);
  fa_context *ctx = NULL;
  if (fa_context_create(&ctx) != FA_OK || fa_merge_states(ctx, FA_BACKEND_REF, nparts, to, tl, &tout, &tlse) != FA_OK) {
    printf("  fa_merge_states failed: %s\n", ctx ? fa_context_last_error(ctx) : "no context");
    fa_context_destroy(ctx);
    return;
  }
  fa_context_destroy(ctx);
  /* the merged state relative to m = max lse_k: l = sum exp(lse_k - m), acc = o * l */
  double m = -INFINITY, l = 0;
  for (int k = 0; k < nparts; ++k) m = lse_parts[k] > m ? lse_parts[k] : m;
  if (m != -INFINITY)
    for (int k = 0; k < nparts; ++k) l += exp(lse_parts[k] - m);
  print_state("  merged: ", m, l, o * l);
  printf("  o = %.10g    lse = %.10g\n", o, lse);
}

int fa_cli_trace(int argc, char **argv) {
  double s[MAX_KEYS] = {1, 2, 3}, v[MAX_KEYS] = {10, 20, 40};
  int ns = 3, nv = 3, tile = 2, merge = 0, scores_given = 0, values_given = 0;
  cli_args a;
  cli_args_init(&a, argc, argv);
  while (cli_args_more(&a)) {
    if (cli_is(&a, "help") || strcmp(a.argv[a.i], "-h") == 0) {
      help();
      return 0;
    } else if (cli_is(&a, "tile")) {
      tile = (int)cli_parse_int("--tile", cli_value(&a), 1, MAX_KEYS);
    } else if (cli_is(&a, "scores")) {
      ns = cli_parse_doubles("--scores", cli_value(&a), s, MAX_KEYS);
      scores_given = 1;
    } else if (cli_is(&a, "values")) {
      nv = cli_parse_doubles("--values", cli_value(&a), v, MAX_KEYS);
      values_given = 1;
    } else if (cli_is(&a, "merge")) {
      cli_flag(&a);
      merge = 1;
    } else {
      cli_unknown(&a);
    }
  }
  if (ns != nv)
    cli_usage_error("%d scores but %d values: give --values with one value per score%s", ns, nv,
                    scores_given && !values_given ? " (the default values are for the default scores)" : "");
  for (int j = 0; j < ns; ++j)
    if (isnan(s[j]) || s[j] == INFINITY) cli_usage_error("--scores: %g is not a score (use -inf to mask)", s[j]);

  printf("online softmax of one query row: %d keys in tiles of %d\n  ", ns, tile);
  print_list("scores s = ", s, ns);
  printf("\n  ");
  print_list("values v = ", v, nv);
  printf("\n\n");
  fa__osm st = fa__osm_init();
  double acc = 0, p[MAX_KEYS];
  print_state("start                 ", st.m, st.l, acc);
  for (int t0 = 0, k = 1; t0 < ns; t0 += tile, ++k) {
    const int nt = ns - t0 < tile ? ns - t0 : tile;
    const double m_old = st.m, l_old = st.l, acc_old = acc;
    if (nt == 1)
      printf("tile %d (key %d): ", k, t0);
    else
      printf("tile %d (keys %d..%d): ", k, t0, t0 + nt - 1);
    print_list("s = ", s + t0, nt);
    printf("\n");
    /* the library's rule: new max, rescale factor, and p = exp(s - m') */
    const double factor = fa__osm_update(&st, s + t0, nt, p);
    double tile_l = 0, tile_acc = 0;
    for (int j = 0; j < nt; ++j) tile_l += p[j], tile_acc += p[j] * v[t0 + j];
    acc = acc * factor + tile_acc;
    double tmax = -INFINITY;
    for (int j = 0; j < nt; ++j) tmax = s[t0 + j] > tmax ? s[t0 + j] : tmax;
    printf("  m' = max(m, tile max) = max(%.6g, %.6g) = %.6g;  rescale = exp(m - m') = %.6g\n", m_old, tmax, st.m,
           factor);
    printf("  ");
    print_list("p = exp(s - m') = ", p, nt);
    printf("\n  l   = l * rescale + sum p = %.6g * %.6g + %.6g = %.6g\n", l_old, factor, tile_l, st.l);
    printf("  acc = acc * rescale + sum p*v = %.6g * %.6g + (", acc_old, factor);
    for (int j = 0; j < nt; ++j) printf("%s%.6g*%.6g", j ? " + " : "", p[j], v[t0 + j]);
    printf(") = %.6g\n", acc);
    print_state("  -> ", st.m, st.l, acc);
  }
  const double o = acc * fa__osm_inv_l(&st), lse = fa__osm_lse(&st);
  double o1, lse1, p1[MAX_KEYS];
  one_shot(s, v, ns, &o1, &lse1, p1);
  printf("\ntiled:    o = acc / l = %.6g / %.6g = %.10g    lse = m + log(l) = %.10g\n", acc, st.l, o, lse);
  printf("one-shot: ");
  print_list("p = softmax(s) = ", p1, ns);
  printf("\n          o = sum p*v = %.10g    lse = log(sum exp(s)) = %.10g\n", o1, lse1);
  if (st.l == 0)
    printf("(every key is masked: o = 0 and lse = -inf by definition, never 0/0)\n");
  else
    printf("|o_tiled - o_one_shot| = %.3g   (rounding only: the two are the same sum)\n", fabs(o - o1));
  if (merge) trace_merge(s, v, ns, tile);
  return 0;
}
