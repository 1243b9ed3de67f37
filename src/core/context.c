#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_status fa_context_create(fa_context **ctx) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  *ctx = (fa_context *)calloc(1, sizeof **ctx);
  return *ctx ? FA_OK : FA_ERR_OUT_OF_MEMORY;
}

void fa_context_destroy(fa_context *ctx) {
  free(ctx);
}

fa_status fa_context_set_threads(fa_context *ctx, int threads) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  if (threads < 0) return fa__fail(ctx, FA_ERR_OPTION, "threads: must be >= 0 (0 = OpenMP's default)");
  ctx->threads = threads;
  ctx->last_error[0] = '\0';
  return FA_OK;
}

fa_status fa_context_set_cpu_isa(fa_context *ctx, fa_cpu_isa isa) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  if (isa < FA_ISA_AUTO || isa > FA_ISA_AMX) return fa__fail(ctx, FA_ERR_OPTION, "isa: not an fa_cpu_isa value");
  ctx->isa = isa;
  ctx->last_error[0] = '\0';
  return FA_OK;
}

fa_status fa_context_set_stream(fa_context *ctx, void *cuda_stream) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  ctx->stream = cuda_stream;
  ctx->last_error[0] = '\0';
  return FA_OK;
}

fa_status fa_context_set_device_checks(fa_context *ctx, int on) {
  if (!ctx) return FA_ERR_NULL_POINTER;
  ctx->device_checks_off = !on;
  ctx->last_error[0] = '\0';
  return FA_OK;
}

const char *fa_context_last_error(const fa_context *ctx) {
  return ctx ? ctx->last_error : "ctx is NULL";
}

fa_backend fa_context_last_backend(const fa_context *ctx) {
  return ctx ? ctx->last_backend : FA_BACKEND_AUTO;
}

const char *fa_context_dispatch_report(const fa_context *ctx) {
  return ctx ? ctx->report : "";
}

fa_status fa__fail(fa_context *ctx, fa_status st, const char *msg) {
  if (ctx) snprintf(ctx->last_error, sizeof ctx->last_error, "%s: %s", fa_status_name(st), msg);
  return st;
}
