/* The backends the suite knows, in one array (backends.c): adding a
 * backend is one line there (CMake reads the names from that array and
 * builds one test program per backend). */
#ifndef FA_TEST_BACKENDS_H
#define FA_TEST_BACKENDS_H

#include "../cases.h"
#include "flashattn.h"

/* One way to run a backend (the cpu backend runs once per ISA). */
typedef struct tb_variant {
  char name[32];
  fa_cpu_isa isa;
  int threads;    /* 0 = default */
  int absent;     /* not on this CPU or build: its tests skip */
  int unselected; /* left out by FA_TEST_CPU_ISAS: its tests skip */
} tb_variant;

typedef struct tb_backend {
  const char *name;
  fa_backend id;
  fa_memory memory; /* where its tensors must live */
  /* FA_OK if the backend is documented to run this case in this dtype (the
   * forward, or the backward when backward is set), else the status it is
   * documented to refuse it with. */
  fa_status (*refuses)(const tcase *c, fa_dtype dt, int backward);
  /* fills out[] with up to max ways to run it; returns how many */
  int (*variants)(tb_variant *out, int max);
} tb_backend;

extern const tb_backend tb_backends[];
extern const int tb_nbackends;

/* NULL if there is no such backend in the list. */
const tb_backend *tb_backend_find(const char *name);
/* The backend a test program is built for (FA_TEST_BACKEND_NAME), with
 * *usable and why as tb_backend_usable says; NULL (and a message on
 * stderr) if the list has no such backend. */
const tb_backend *tb_program_backend(const char *name, int *usable, char *why, size_t why_size);
/* 1 if be can run here (compiled in, a device for it and for the tests'
 * own device allocations); else 0 with the reason in why. */
int tb_backend_usable(const tb_backend *be, char *why, size_t why_size);
/* Sets the variant's ISA and threads on ctx (cmocka-asserts success). */
void tb_variant_apply(fa_context *ctx, const tb_variant *v);

#endif
