/* fa_forward / fa_backward: validate once, pick the backend, run it, and
 * record in the context which backend ran and why the others did not. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "context.h"
#include "kv_host.h"
#include "validate.h"

/* Order in which `auto` tries backends for each memory space: fastest first. */
static const fa_backend auto_order_host[] = {FA_BACKEND_CPU, FA_BACKEND_REF};
static const fa_backend auto_order_cuda[] = {FA_BACKEND_CUDA};

/* Appends one printf-formatted line to the context's dispatch report. */
static void report_add(fa_context *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void report_add(fa_context *ctx, const char *fmt, ...) {
  const size_t used = strlen(ctx->report);
  if (used + 1 >= sizeof ctx->report) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->report + used, sizeof ctx->report - used, fmt, ap);
  va_end(ap);
}

/* Can backend id run p? Fills err with the reason when not. */
static fa_status try_backend(fa_backend id, const fa__problem *p, fa__err *err) {
  const fa__backend *be = fa__backend_get(id);
  if (!be) {
    fa__err_set(err, "%s backend is not compiled into this build", fa_backend_name(id));
    return FA_ERR_NO_BACKEND;
  }
  fa_status st = be->available(err);
  if (st != FA_OK) return st;
  st = be->supports(p, err);
  if (st == FA_OK && p->kvcache && !be->forward_kvcache) {
    fa__err_set(err,
                "%s has no fa_forward_kvcache yet (missing: the append/rotary kernel that writes k_new/v_new into "
                "the cache, paged K/V addressing and the split-KV decode kernels with their merge)",
                be->name);
    st = FA_ERR_UNSUPPORTED;
  }
  return st;
}

static fa_status run(fa_context *ctx, fa_backend backend, const fa__call *call) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  ctx->last_error[0] = '\0';
  ctx->report[0] = '\0';
  ctx->last_backend = FA_BACKEND_AUTO;
  if ((int)backend < FA_BACKEND_AUTO || backend >= FA_BACKEND_COUNT)
    return fa__fail(ctx, FA_ERR_OPTION, "backend: not an fa_backend value");

  fa__err err = {{0}};
  fa__problem p;
  fa_status st = fa__problem_build(&p, call, &err);
  if (st != FA_OK) return fa__fail(ctx, st, err.msg);
  p.threads = ctx->threads;
  p.isa = ctx->isa;
  p.stream = ctx->stream;

  fa_backend chosen = FA_BACKEND_AUTO;
  if (backend != FA_BACKEND_AUTO) {
    st = try_backend(backend, &p, &err);
    if (st != FA_OK) {
      report_add(ctx, "%s: refused: %s\n", fa_backend_name(backend), err.msg);
      char msg[640];
      snprintf(msg, sizeof msg, "%s backend cannot run this call: %s", fa_backend_name(backend), err.msg);
      return fa__fail(ctx, st, msg);
    }
    chosen = backend;
    report_add(ctx, "%s: chosen by name\n", fa_backend_name(backend));
  } else {
    const fa_backend *order = p.memory == FA_MEMORY_CUDA ? auto_order_cuda : auto_order_host;
    const int n = p.memory == FA_MEMORY_CUDA ? 1 : 2;
    fa_status first_st = FA_ERR_NO_BACKEND;
    char first_msg[512] = "";
    for (int i = 0; i < n; ++i) {
      fa__err why = {{0}};
      const fa_status s = try_backend(order[i], &p, &why);
      if (s == FA_OK && chosen == FA_BACKEND_AUTO) {
        chosen = order[i];
        report_add(ctx, "%s: chosen (fastest that takes the call)\n", fa_backend_name(order[i]));
      } else if (s != FA_OK) {
        report_add(ctx, "%s: passed over: %s\n", fa_backend_name(order[i]), why.msg);
        if (first_msg[0] == '\0') {
          first_st = s;
          snprintf(first_msg, sizeof first_msg, "%s", why.msg);
        }
      }
    }
    if (chosen == FA_BACKEND_AUTO) {
      char msg[640];
      snprintf(msg, sizeof msg, "no backend can run this call (%s memory); first reason: %s",
               p.memory == FA_MEMORY_CUDA ? "CUDA device" : "host", first_msg);
      return fa__fail(ctx, first_st, msg);
    }
  }

  if (chosen == FA_BACKEND_CPU) { /* the debug line of BLIS's probe: what the cpu backend will use */
    fa_cpu_plan plan;
    char threads[24] = "OpenMP's default";
    if (p.threads > 0) snprintf(threads, sizeof threads, "%d", p.threads);
    if (fa_cpu_plan_get_dtype(p.isa, p.dtype, p.D, p.Dv, p.block_q, p.block_k, &plan) == FA_OK) {
      if (p.kvcache)
        report_add(ctx, "cpu: isa %s, kv-cache decode path, threads: %s\n", fa_cpu_isa_name(plan.isa), threads);
      else if (p.pass == FA__FORWARD)
        report_add(ctx, "cpu: isa %s, tiles %d x %d (%zu bytes hot per tile step), threads: %s\n",
                   fa_cpu_isa_name(plan.isa), plan.block_q, plan.block_k, plan.working_set_bytes, threads);
      else /* the backward sizes its own tiles per problem */
        report_add(ctx, "cpu: isa %s, threads: %s%s\n", fa_cpu_isa_name(plan.isa), threads,
                   p.deterministic ? ", deterministic" : "");
      if ((plan.isa == FA_ISA_AVX512BF16 || plan.isa == FA_ISA_AMX) && !p.kvcache) {
        const char *ins = plan.isa == FA_ISA_AMX ? "AMX tiles (tdpbf16ps)" : "vdpbf16ps";
        if (p.dtype != FA_BF16)
          report_add(ctx, "cpu: %s inputs: the avx512 f32 kernels (%s serves bf16 inputs only)\n",
                     fa_dtype_name(p.dtype), ins);
        else if (p.pass == FA__FORWARD)
          report_add(ctx,
                     "cpu: bf16 products on %s (Q.K^T, and P.V with P rounded to bf16); the decode "
                     "pass (few query rows, long keys) reads bf16 into f32 kernels\n",
                     ins);
        else
          report_add(ctx, "cpu: bf16 products on %s (S, dP; dV, dK, dQ with P and dS rounded to bf16)\n", ins);
      }
    }
  }

  const fa__backend *be = fa__backend_get(chosen);
  st = p.kvcache               ? be->forward_kvcache(&p, &err)
       : p.pass == FA__FORWARD ? be->forward(&p, &err)
                               : be->backward(&p, &err);
  if (st != FA_OK) return fa__fail(ctx, st, err.msg);
  ctx->last_backend = chosen;
  return FA_OK;
}

fa_status fa_forward(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                     const fa_options *opt, fa_tensor *o, fa_tensor *lse) {
  fa__call c;
  memset(&c, 0, sizeof c);
  c.pass = FA__FORWARD;
  c.stream = ctx ? ctx->stream : NULL;
  c.q = q;
  c.k = k;
  c.v = v;
  c.o = o;
  c.lse = lse;
  c.opt = opt;
  return run(ctx, backend, &c);
}

fa_status fa_backward(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                      const fa_tensor *o, const fa_tensor *dout, const fa_tensor *lse, const fa_options *opt,
                      fa_tensor *dq, fa_tensor *dk, fa_tensor *dv, fa_tensor *dbias) {
  fa__call c;
  memset(&c, 0, sizeof c);
  c.pass = FA__BACKWARD;
  c.stream = ctx ? ctx->stream : NULL;
  c.q = q;
  c.k = k;
  c.v = v;
  c.o = o;
  c.lse = lse;
  c.dout = dout;
  c.dq = dq;
  c.dk = dk;
  c.dv = dv;
  c.dbias = dbias;
  c.opt = opt;
  return run(ctx, backend, &c);
}

fa_status fa_forward_kvcache(fa_context *ctx, fa_backend backend, const fa_tensor *q, const fa_kvcache *cache,
                             const fa_options *opt, fa_tensor *o, fa_tensor *lse) {
  fa__call c;
  memset(&c, 0, sizeof c);
  c.pass = FA__FORWARD;
  c.kvcache = 1;
  c.cache = cache;
  c.trust_device_values = ctx && ctx->device_checks_off;
  c.stream = ctx ? ctx->stream : NULL;
  c.q = q;
  c.o = o;
  c.lse = lse;
  c.opt = opt;
  return run(ctx, backend, &c);
}

fa_status fa_merge_states(fa_context *ctx, fa_backend backend, int n, const fa_tensor *o_parts,
                          const fa_tensor *lse_parts, fa_tensor *o, fa_tensor *lse) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  ctx->last_error[0] = '\0';
  ctx->report[0] = '\0';
  ctx->last_backend = FA_BACKEND_AUTO;
  if ((int)backend < FA_BACKEND_AUTO || backend >= FA_BACKEND_COUNT)
    return fa__fail(ctx, FA_ERR_OPTION, "backend: not an fa_backend value");
  fa__err err = {{0}};
  fa_memory where;
  fa_status st = fa__merge_check(n, o_parts, lse_parts, o, lse, &where, &err);
  if (st != FA_OK) return fa__fail(ctx, st, err.msg);
  fa_backend chosen =
      backend == FA_BACKEND_AUTO ? (where == FA_MEMORY_CUDA ? FA_BACKEND_CUDA : FA_BACKEND_CPU) : backend;
  if (chosen == FA_BACKEND_CPU && !fa__backend_get(FA_BACKEND_CPU) && backend == FA_BACKEND_AUTO)
    chosen = FA_BACKEND_REF;
  if (!fa__backend_get(chosen)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s backend is not compiled into this build", fa_backend_name(chosen));
    return fa__fail(ctx, FA_ERR_NO_BACKEND, msg);
  }
  if (chosen == FA_BACKEND_CUDA) {
    const fa__backend *be = fa__backend_get(chosen);
    st = be->available(&err);
    if (st != FA_OK) return fa__fail(ctx, st, err.msg);
    if (where != FA_MEMORY_CUDA)
      return fa__fail(ctx, FA_ERR_MEMORY_SPACE,
                      "cuda backend cannot run this call: it needs CUDA device memory; the tensors are in host memory");
    st = be->merge_states(n, o_parts, lse_parts, o, lse, ctx->stream, &err);
    if (st != FA_OK) return fa__fail(ctx, st, err.msg);
    report_add(ctx, "cuda: %s (the device merge, float64)\n", backend == FA_BACKEND_AUTO ? "chosen" : "chosen by name");
    ctx->last_backend = chosen;
    return FA_OK;
  }
  if (where == FA_MEMORY_CUDA) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s backend cannot run this call: it needs host memory; the tensors are in CUDA memory",
             fa_backend_name(chosen));
    return fa__fail(ctx, FA_ERR_MEMORY_SPACE, msg);
  }
  st = fa__merge_host(n, o_parts, lse_parts, o, lse, &err);
  if (st != FA_OK) return fa__fail(ctx, st, err.msg);
  report_add(ctx, "%s: %s (the host merge, float64)\n", fa_backend_name(chosen),
             backend == FA_BACKEND_AUTO ? "chosen" : "chosen by name");
  ctx->last_backend = chosen;
  return FA_OK;
}
