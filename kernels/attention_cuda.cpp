// attention on cuda: the cuDNN graphs of kernels/attention_cudnn_cuda.cpp, or the flash kernel
// (kernels/attention_flash.cu) for packed rows, whose masks cuDNN's graphs here do not know.
#define STRATA_CUDA_OP_IMPL
#include "kernels/attention_cuda.h"

#include <fmt/format.h>

#include "engine/backend.h"
#include "engine/op_scratch.h"
#include "kernels/op_dispatch.h"

namespace strata {
namespace {

// Packed rows (sample packing) run the flash kernel with the rows' positions [B*T] (null: unpacked).
const int32_t* packed_pos(const Tensor& pos, const Tensor& q) {
  if (!pos.defined()) return nullptr;
  STRATA_CHECK(pos.dtype == DType::i32 && pos.numel() == q.shape[0] * q.shape[1],
               "attention: the packed positions are not [B*T] i32");
  if (q.shape[3] > 128)
    STRATA_THROW(UnsupportedError, fmt::format("sample packing on cuda runs the flash attention kernel, which "
                                               "takes head_dim <= 128 (this model's is {}); turn packing off",
                                               q.shape[3]));
  return pos.i32();
}
// The workspace block (engine/ops/attention.cpp: the last scratch block, after any unused gradients).
Tensor workspace(const ScratchSet& sc) {
  return sc.at(scratch_tag::attn_workspace);
}

}  // namespace

// attention_fwd(out, lse, q, k, v, pos) and attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, pos; acc_dq,
// acc_dk, acc_dv).
void attention_cuda(const OpCall& c, const CudaOpContext& ctx) {
  using namespace dispatch;
  const auto& t = c.t;
  const cudaStream_t s = static_cast<cudaStream_t>(ctx.stream);
  const Tensor &q = t[c.backward ? 4 : 2], &k = t[c.backward ? 5 : 3];
  const cuda::AttnShape sh{int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(k.shape[2]), int(q.shape[3])};
  const int32_t* pos = packed_pos(t[c.backward ? 9 : 5], q);
  if (!c.backward) {
    if (pos) return cuda::flash_attention_fwd(bf16(t[0]), f32(t[1]), bf16(q), bf16(k), bf16(t[4]), sh, s, pos);
    const Tensor ws = workspace(ctx.scratch);
    return ctx.attn.fwd(bf16(t[0]), f32(t[1]), bf16(q), bf16(k), bf16(t[4]), sh, ws.data, ws.defined() ? ws.bytes() : 0,
                        s);
  }
  const Tensor &dq = t[0], &dk = t[1], &dv = t[2];
  // A gradient nobody needs still has to land somewhere: the op's scratch blocks, in dq, dk, dv order.
  size_t next = 0;
  cuda::bf16* pq = dq.defined() ? bf16(dq) : bf16(ctx.scratch[next++]);
  cuda::bf16* pk = dk.defined() ? bf16(dk) : bf16(ctx.scratch[next++]);
  cuda::bf16* pv = dv.defined() ? bf16(dv) : bf16(ctx.scratch[next++]);
  // One mode for all three: an overwrite lets cuDNN write them in place; adding goes through scratch and three
  // adds. Mixed flags (no op records them today) add, into zeroed ones.
  const bool accumulate = c.acc[0] || c.acc[1] || c.acc[2];
  if (accumulate) {
    if (!c.acc[0] && dq.defined()) ctx.be.zero(dq);
    if (!c.acc[1] && dk.defined()) ctx.be.zero(dk);
    if (!c.acc[2] && dv.defined()) ctx.be.zero(dv);
  }
  if (pos)  // the flash kernel adds in place: no scratch
    return cuda::flash_attention_bwd(pq, pk, pv, bf16(t[3]), bf16(q), bf16(k), bf16(t[6]), bf16(t[7]), f32(t[8]), sh,
                                     accumulate, s, pos);
  const Tensor ws = workspace(ctx.scratch);
  ctx.attn.bwd(pq, pk, pv, bf16(t[3]), bf16(q), bf16(k), bf16(t[6]), bf16(t[7]), f32(t[8]), sh, accumulate, ws.data,
               ws.defined() ? ws.bytes() : 0, s);
}

}  // namespace strata
