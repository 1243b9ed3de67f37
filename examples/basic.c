/* The README's example: causal attention on the fastest host backend,
 * then its gradients. Build: see examples/CMakeLists.txt. */
#include <flashattn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  enum { B = 1, H = 4, L = 256, D = 64 };
  const size_t n = (size_t)B * H * L * D;
  float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4), *lse = malloc(B * H * L * 4);
  float *dout = malloc(n * 4), *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
  for (size_t i = 0; i < n; ++i) q[i] = k[i] = v[i] = dout[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;

  fa_context *ctx;
  fa_context_create(&ctx);
  fa_tensor Q = fa_tensor_contiguous(q, FA_F32, B, H, L, D), K = fa_tensor_contiguous(k, FA_F32, B, H, L, D),
            V = fa_tensor_contiguous(v, FA_F32, B, H, L, D), O = fa_tensor_contiguous(o, FA_F32, B, H, L, D),
            LSE = fa_tensor_contiguous(lse, FA_F32, B, H, L, 1), dO = fa_tensor_contiguous(dout, FA_F32, B, H, L, D),
            dQ = fa_tensor_contiguous(dq, FA_F32, B, H, L, D), dK = fa_tensor_contiguous(dk, FA_F32, B, H, L, D),
            dV = fa_tensor_contiguous(dv, FA_F32, B, H, L, D);
  fa_options opt;
  fa_options_init(&opt);
  opt.causal = 1;

  fa_status st = fa_forward(ctx, FA_BACKEND_AUTO, &Q, &K, &V, &opt, &O, &LSE);
  if (st == FA_OK) st = fa_backward(ctx, FA_BACKEND_AUTO, &Q, &K, &V, &O, &dO, &LSE, &opt, &dQ, &dK, &dV, NULL);
  if (st != FA_OK) {
    fprintf(stderr, "%s\n", fa_context_last_error(ctx));
    return 1;
  }
  printf("ran on %s: o[0] = %f, dq[0] = %f\n", fa_backend_name(fa_context_last_backend(ctx)), o[0], dq[0]);
  fa_context_destroy(ctx);
  free(q), free(k), free(v), free(o), free(lse), free(dout), free(dq), free(dk), free(dv);
  return 0;
}
