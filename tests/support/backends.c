/* What each backend is documented to take (DESIGN.md, issues 3 and 5), and
 * how many ways it is run. A backend that refuses a case must refuse it with
 * exactly the status written here, never crash or fall back. */
#include "backends.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm.h"
#include "device.h"

static fa_status refuses_ref(const tcase *c, fa_dtype dt, int backward) {
  (void)c, (void)dt, (void)backward;
  return FA_OK; /* the oracle takes everything */
}

/* cpu: f32, f16 and bf16 (computed in f32); every option. */
static fa_status refuses_cpu(const tcase *c, fa_dtype dt, int backward) {
  (void)c, (void)backward;
  return dt == FA_F64 ? FA_ERR_DTYPE : FA_OK;
}

/* cuda: f16, bf16, f32; head dims that are multiples of 8 up to 256; a
 * contiguous last dimension. */
static fa_status refuses_cuda(const tcase *c, fa_dtype dt, int backward) {
  (void)backward;
  if (dt == FA_F64) return FA_ERR_DTYPE;
  if (c->D % 8 || c->Dv % 8 || c->D > 256 || c->Dv > 256) return FA_ERR_UNSUPPORTED;
  if (c->layout == TL_STRIDED) return FA_ERR_UNSUPPORTED;
  return FA_OK;
}

static int variants_one(tb_variant *out, int max) {
  if (max < 1) return 0;
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "default");
  return 1;
}

/* Whether FA_TEST_CPU_ISAS (a comma-separated list of ISA names, "best"
 * for the widest this CPU has) leaves isa out; unset or empty: none. The
 * TSan run (scripts/dev.sh test-tsan) sets it: the threads' work and
 * synchronization are the same on every ISA, only the micro-kernels differ,
 * and ASan runs those all. */
static int isa_unselected(fa_cpu_isa isa, fa_cpu_isa best) {
  const char *list = getenv("FA_TEST_CPU_ISAS");
  if (!list || !*list) return 0;
  const char *name = fa_cpu_isa_name(isa);
  const size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const size_t len = strcspn(p, ",");
    if ((len == n && !strncmp(p, name, n)) || (len == 4 && !strncmp(p, "best", 4) && isa == best)) return 0;
    p += len + (p[len] == ',');
  }
  return 1;
}

/* Every ISA this CPU and build have, so that the AVX2 and portable paths
 * are tested on an AVX-512 machine too. amx, where this CPU lacks it, is
 * listed as a variant whose tests skip (a machine without AMX does not
 * pass its cases: it did not run them). */
static int variants_cpu_isas(tb_variant *out, int max) {
  static const fa_cpu_isa isas[] = {FA_ISA_GENERIC, FA_ISA_AVX2, FA_ISA_AVX512, FA_ISA_AVX512BF16, FA_ISA_AMX};
  fa_cpu_isa best = FA_ISA_GENERIC;
  for (size_t i = 0; i < sizeof isas / sizeof isas[0]; ++i)
    if (fa_cpu_isa_supported(isas[i])) best = isas[i];
  int n = 0;
  for (size_t i = 0; i < sizeof isas / sizeof isas[0] && n < max; ++i) {
    const int have = fa_cpu_isa_supported(isas[i]);
    if (!have && isas[i] != FA_ISA_AMX) continue;
    memset(&out[n], 0, sizeof out[n]);
    out[n].isa = isas[i];
    out[n].absent = !have;
    out[n].unselected = have && isa_unselected(isas[i], best);
    snprintf(out[n].name, sizeof out[n].name, "%s", fa_cpu_isa_name(isas[i]));
    ++n;
  }
  return n;
}

/* THE list. One line per backend; CMake parses the names from it. */
const tb_backend tb_backends[] = {
    {"ref", FA_BACKEND_REF, FA_MEMORY_HOST, refuses_ref, variants_one},
    {"cpu", FA_BACKEND_CPU, FA_MEMORY_HOST, refuses_cpu, variants_cpu_isas},
    {"cuda", FA_BACKEND_CUDA, FA_MEMORY_CUDA, refuses_cuda, variants_one},
};
const int tb_nbackends = (int)(sizeof tb_backends / sizeof tb_backends[0]);

const tb_backend *tb_backend_find(const char *name) {
  for (int i = 0; i < tb_nbackends; ++i)
    if (strcmp(tb_backends[i].name, name) == 0) return &tb_backends[i];
  return NULL;
}

int tb_backend_usable(const tb_backend *be, char *why, size_t why_size) {
  if (fa_backend_available(be->id, why, why_size) != FA_OK) return 0;
  if (be->memory == FA_MEMORY_CUDA && !tdev_available()) {
    snprintf(why, why_size, "no CUDA device for the test's own allocations: %s", tdev_last_error());
    return 0;
  }
  return 1;
}

const tb_backend *tb_program_backend(const char *name, int *usable, char *why, size_t why_size) {
  const tb_backend *be = tb_backend_find(name);
  if (!be) {
    fprintf(stderr, "backend \"%s\" is not in support/backends.c\n", name);
    return NULL;
  }
  *usable = tb_backend_usable(be, why, why_size);
  return be;
}

void tb_variant_apply(fa_context *ctx, const tb_variant *v) {
  assert_int_equal(fa_context_set_cpu_isa(ctx, v->isa), FA_OK);
  assert_int_equal(fa_context_set_threads(ctx, v->threads), FA_OK);
}
