// The fused LM head and cross-entropy on cuda: per chunk a cuBLASLt logits GEMM (fp32), the softmax kernels of
// kernels/cross_entropy.cu, and the chunk's dx and dw GEMMs; the scratch is the op's (engine/ops/lm_head_ce.cpp).
#define STRATA_CUDA_OP_IMPL
#include <algorithm>

#include "engine/backend.h"
#include "engine/op_scratch.h"
#include "kernels/gemm_cuda.h"
#include "kernels/op_dispatch.h"
#include "kernels/ops_cuda.h"

namespace strata {
namespace {

using dispatch::bf16;
using dispatch::f32;

// The per-chunk gradients from the chunk's dlogits [n, V]: dx rows [r0, r0 + n) are the chunk's own; dw sums over
// chunks, so only the first chunk may overwrite it (gradients: bf16 rounds once per chunk, each chunk one GEMM).
void chunk_grads(const CudaOpContext& ctx, const Tensor& dx, const Tensor& dw, const Tensor& dlogits, const Tensor& x,
                 const Tensor& w, int r0, int n, bool acc_dx, bool acc_dw) {
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const int C = int(dispatch::cols(x)), V = int(w.shape[0]);
  if (dx.defined()) ctx.gemm.linear_bwd_dx(bf16(dx) + size_t(r0) * C, bf16(dlogits), bf16(w), n, C, V, acc_dx, s);
  if (!dw.defined()) return;
  if (dw.dtype == DType::bf16)
    ctx.gemm.linear_bwd_dw(bf16(dw), bf16(dlogits), bf16(x) + size_t(r0) * C, n, C, V, acc_dw || r0 > 0, s);
  else
    ctx.gemm.linear_bwd_dw(f32(dw), bf16(dlogits), bf16(x) + size_t(r0) * C, n, C, V, acc_dw || r0 > 0, s);
}

}  // namespace

// The four passes (engine/ops/lm_head_ce.cpp); n: chunk rows, n2: the real vocabulary.
void lm_head_ce_cuda(const OpCall& c, const CudaOpContext& ctx) {
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const int chunk = int(c.n), vocab = int(c.n2);
  if (c.form == 3)  // lm_head_ce_bwd_saved(dx, dloss, saved_dx; acc_dx, dw_written)
    return cuda::ce_dx_from_saved(bf16(t[0]), bf16(t[2]), f32(t[1]), c.scalar, c.acc[1], size_t(t[0].numel()), c.acc[0],
                                  s);
  const ScratchSet& sc = ctx.scratch;
  const Tensor logits = sc.at(scratch_tag::logits_chunk), dlogits = sc.at(scratch_tag::dlogits_chunk),
               token_loss = sc.at(scratch_tag::token_loss), n_valid = sc.at(scratch_tag::n_valid);
  if (c.form == 0) {  // lm_head_ce_fwd(loss, lse, x, w, targets)
    const Tensor &x = t[2], &w = t[3], &targets = t[4];
    const int N = int(dispatch::rows(x)), C = int(dispatch::cols(x)), V = int(w.shape[0]);
    for (int r0 = 0; r0 < N; r0 += chunk) {
      const int n = std::min(chunk, N - r0);
      ctx.gemm.logits_f32(f32(logits), bf16(x) + size_t(r0) * C, bf16(w), n, C, V, s);
      cuda::ce_chunk_fwd(f32(t[1]) + r0, f32(token_loss) + r0, f32(logits), targets.i32() + r0, n, V, vocab, s);
    }
    cuda::ce_count_valid(f32(n_valid), targets.i32(), N, s);
    return cuda::ce_finalize(f32(t[0]), f32(token_loss), f32(n_valid), N, s);
  }
  const Tensor &x = t[3], &w = t[4], &targets = t[5];
  const int N = int(dispatch::rows(x)), C = int(dispatch::cols(x)), V = int(w.shape[0]);
  cuda::ce_count_valid(f32(n_valid), targets.i32(), N, s);
  if (c.form == 1) {  // lm_head_ce_bwd(dx, dw, dloss, x, w, targets, lse; acc_dx, acc_dw)
    const Tensor &dx = t[0], &dw = t[1];
    for (int r0 = 0; r0 < N; r0 += chunk) {
      const int n = std::min(chunk, N - r0);
      ctx.gemm.logits_f32(f32(logits), bf16(x) + size_t(r0) * C, bf16(w), n, C, V, s);
      cuda::ce_chunk_bwd(bf16(dlogits), f32(logits), f32(t[6]) + r0, targets.i32() + r0, f32(t[2]), f32(n_valid), n, V,
                         vocab, s);
      chunk_grads(ctx, dx, dw, dlogits, x, w, r0, n, c.acc[0], c.acc[1]);
    }
    if (N == 0 && dw.defined() && !c.acc[1]) ctx.be.zero(dw);  // no chunk ran: the overwrite still owes zeros
    return;
  }
  // lm_head_ce_fwd_grad(loss, dx, dw, x, w, targets; dloss_assumed, acc_dw): per chunk one logits GEMM, then
  // ce_chunk_fwd_bwd's loss terms and dlogits, then the dx GEMM (into the op's saved dx) and the dw GEMM.
  const Tensor &dx = t[1], &dw = t[2];
  for (int r0 = 0; r0 < N; r0 += chunk) {
    const int n = std::min(chunk, N - r0);
    ctx.gemm.logits_f32(f32(logits), bf16(x) + size_t(r0) * C, bf16(w), n, C, V, s);
    cuda::ce_chunk_fwd_bwd(f32(token_loss) + r0, bf16(dlogits), f32(logits), targets.i32() + r0, f32(n_valid), c.scalar,
                           n, V, vocab, s);
    chunk_grads(ctx, dx, dw, dlogits, x, w, r0, n, false, c.acc[1]);
  }
  cuda::ce_finalize(f32(t[0]), f32(token_loss), f32(n_valid), N, s);
  if (N == 0 && dw.defined() && !c.acc[1]) ctx.be.zero(dw);  // no chunk ran: the overwrite still owes zeros
}

}  // namespace strata
