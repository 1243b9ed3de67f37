/* The eager baseline must compute attention: its forward and backward on
 * every ISA this CPU has, against the float64 ref backend. (Its speed is
 * what bench measures; its numbers must be right for that to mean much.) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "eager.h"
#include "instance.h"
#include "peak.h"

static int passed, failed;

static void check(const char *what, const fa_tensor *x, const fa_tensor *ref) {
  cli_cmp c;
  const cli_tol tol = {2e-4, 2e-4};
  cli_compare(x, ref, 4, tol, &c);
  const int ok = c.bad == 0;
  printf("%s %s: max |err| %.3g\n", ok ? "ok  " : "FAIL", what, c.max_abs);
  ok ? ++passed : ++failed;
}

static void run_case(const char *name, const cli_spec *s) {
  cli_instance ref, x;
  cli_instance_alloc(&ref, s, FA_F64, FA_F64, 1);
  cli_instance_fill(&ref, s, FA_F32);
  fa_context *ctx;
  fa_context_create(&ctx);
  if (fa_forward(ctx, FA_BACKEND_REF, &ref.q, &ref.k, &ref.v, &ref.opt, &ref.o, &ref.lse) != FA_OK ||
      fa_backward(ctx, FA_BACKEND_REF, &ref.q, &ref.k, &ref.v, &ref.o, &ref.dout, &ref.lse, &ref.opt, &ref.dq, &ref.dk,
                  &ref.dv, NULL) != FA_OK) {
    printf("FAIL %s: ref: %s\n", name, fa_context_last_error(ctx));
    ++failed;
    return;
  }
  const fa_cpu_isa isas[] = {FA_ISA_GENERIC, FA_ISA_AVX2, FA_ISA_AVX512};
  for (int i = 0; i < 3; ++i) {
    if (!fa_peak_isa_present(isas[i])) continue;
    cli_instance_alloc(&x, s, FA_F32, FA_F32, 1);
    cli_instance_fill(&x, s, FA_F32);
    fa_eager_problem p = {s->B, s->Hq, s->Hkv, s->Lq, s->Lk, s->D, s->Dv, s->causal, 0, isas[i], 0};
    fa_eager_ws ws;
    memset(&ws, 0, sizeof ws);
    char what[128];
    if (fa_eager_forward(&p, &ws, x.q.data, x.k.data, x.v.data, x.o.data) != 0 ||
        fa_eager_backward(&p, &ws, x.q.data, x.k.data, x.v.data, x.o.data, x.dout.data, x.dq.data, x.dk.data,
                          x.dv.data) != 0) {
      printf("FAIL %s/%s: out of memory\n", name, fa_cpu_isa_name(isas[i]));
      ++failed;
    } else {
      snprintf(what, sizeof what, "%s/%s O", name, fa_cpu_isa_name(isas[i]));
      check(what, &x.o, &ref.o);
      snprintf(what, sizeof what, "%s/%s dQ", name, fa_cpu_isa_name(isas[i]));
      check(what, &x.dq, &ref.dq);
      snprintf(what, sizeof what, "%s/%s dK", name, fa_cpu_isa_name(isas[i]));
      check(what, &x.dk, &ref.dk);
      snprintf(what, sizeof what, "%s/%s dV", name, fa_cpu_isa_name(isas[i]));
      check(what, &x.dv, &ref.dv);
    }
    fa_eager_ws_free(&ws);
    cli_instance_free(&x);
  }
  cli_instance_free(&ref);
  fa_context_destroy(ctx);
}

int main(void) {
  cli_spec s;
  cli_spec_default_check(&s); /* B=2 Hq=4 Hkv=2 L=200 D=64 causal: GQA and ragged tiles */
  run_case("causal GQA L=200", &s);
  s.causal = 0, s.Lq = 37, s.Lk = 91, s.D = 40, s.Dv = 24, s.Hkv = 1;
  run_case("plain Lq!=Lk D!=Dv MQA", &s);
  s.causal = 1, s.Lq = 70, s.Lk = 33;
  run_case("causal Lq>Lk", &s);
  printf("%d passed, %d failed\n", passed, failed);
  return failed != 0;
}
