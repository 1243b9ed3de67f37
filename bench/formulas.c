#include "formulas.h"

#include <string.h>

double fa_flops_forward(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, int causal) {
  const double f = 2.0 * (double)B * (double)H * (double)Lq * (double)Lk * (double)(D + Dv);
  return causal ? 0.5 * f : f;
}

double fa_flops_backward(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t D, int64_t Dv, int causal) {
  return 2.5 * fa_flops_forward(B, H, Lq, Lk, D, Dv, causal);
}

double fa_bytes_tensor(int64_t d0, int64_t d1, int64_t d2, size_t elem) {
  return (double)d0 * (double)d1 * (double)d2 * (double)elem;
}

static void finish(const fa_io_problem *p, fa_io_counts *c) {
  c->total = c->read_qkv + c->write_o + c->write_lse + c->write_s + c->read_s + c->write_p + c->read_p;
  c->flops = fa_flops_forward(p->B, p->H, p->L, p->L, p->D, p->Dv, p->causal);
  c->intensity = c->total > 0 ? c->flops / c->total : 0;
}

void fa_io_eager(const fa_io_problem *p, fa_io_counts *c) {
  memset(c, 0, sizeof *c);
  const double bh = (double)p->B * (double)p->H, L = (double)p->L, e = (double)p->elem;
  c->read_qkv = bh * L * (double)(2 * p->D + p->Dv) * e;
  c->write_o = bh * L * (double)p->Dv * e;
  c->write_s = c->read_s = c->write_p = c->read_p = bh * L * L * e;
  finish(p, c);
}

void fa_io_tiled(const fa_io_problem *p, fa_io_counts *c) {
  memset(c, 0, sizeof *c);
  const double bh = (double)p->B * (double)p->H, L = (double)p->L, e = (double)p->elem;
  const int64_t bq = p->block_q > 0 ? p->block_q : 64, bk = p->block_k > 0 ? p->block_k : 64;
  /* key/value rows read over all Q tiles */
  double kv_rows = 0;
  for (int64_t q0 = 0; q0 < p->L; q0 += bq) {
    int64_t rows = p->L;
    if (p->causal) { /* key tiles up to the one holding the tile's last row */
      int64_t last = q0 + bq < p->L ? q0 + bq : p->L;
      rows = (last + bk - 1) / bk * bk;
      if (rows > p->L) rows = p->L;
    }
    kv_rows += (double)rows;
  }
  c->read_qkv = bh * (L * (double)p->D + kv_rows * (double)(p->D + p->Dv)) * e;
  c->write_o = bh * L * (double)p->Dv * e;
  c->write_lse = bh * L * 4.0;
  finish(p, c);
}

double fa_roofline_gflops(double intensity, double peak_gflops, double bw_gbs) {
  const double mem = intensity * bw_gbs;
  return mem < peak_gflops ? mem : peak_gflops;
}
