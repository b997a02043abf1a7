// The implementations of the table-dispatched ops (engine/op_table.h STRATA_OPS), each defined beside its
// kernels: <op>_cpu in kernels/<op>_cpu.cpp, <op>_cuda in kernels/<op>.cu. The backends find them by the op list.
#pragma once
#include <cstdint>

// The cuda implementations: kernels/<op>.cu, or host code in kernels/<op>_cuda.cpp that defines
// STRATA_CUDA_OP_IMPL before including this header.
#if defined(__CUDACC__) || defined(STRATA_CUDA_OP_IMPL)
#define STRATA_OP_DISPATCH_CUDA 1
#include <cuda_bf16.h>
#endif

#include "engine/op_scratch.h"
#include "engine/op_table.h"
#include "kernels/grad_cpu.h"

namespace strata {

class Backend;
namespace cuda {
class Gemm;
class Attention;
}  // namespace cuda

// What a cuda implementation runs with: the compute stream (a cudaStream_t), its scratch, taken by the backend
// from the op's description (OpInfo::scratch) in the description's order, the backend's cuBLASLt GEMMs and cuDNN
// attention plans, and the backend itself (for zero()).
struct CudaOpContext {
  void* stream;
  const ScratchSet& scratch;
  cuda::Gemm& gemm;
  cuda::Attention& attn;
  Backend& be;
};

#define STRATA_DECLARE_OP_IMPLS(op) \
  void op##_cpu(const OpCall& c);   \
  void op##_cuda(const OpCall& c, const CudaOpContext& ctx);
STRATA_OPS(STRATA_DECLARE_OP_IMPLS)
#undef STRATA_DECLARE_OP_IMPLS

// cuda keeps fp32 masters split (engine/master_split.h): an i16 low half `lo` and the bf16 weights `hi` of one
// shape, contiguous; Error naming both otherwise (kernels/adamw_cuda.cpp).
void check_split_master(const Tensor& lo, const Tensor& hi);

namespace dispatch {
inline int64_t rows(const Tensor& t) {
  return t.numel() / t.shape[t.shape.nd - 1];
}
inline int64_t cols(const Tensor& t) {
  return t.shape[t.shape.nd - 1];
}
inline float* f32(const Tensor& t) {
  return t.defined() ? t.f32() : nullptr;
}
// A parameter gradient the cpu kernels write: f32, bf16 (gradients: bf16), or none.
inline cpu::GradOut grad_out(const Tensor& t) {
  if (!t.defined()) return {};
  if (t.dtype == DType::bf16) return cpu::GradOut::bf16(static_cast<uint16_t*>(t.data));
  return t.f32();
}
#ifdef STRATA_OP_DISPATCH_CUDA
// A bf16 activation of the cuda backend (null when undefined).
inline __nv_bfloat16* bf16(const Tensor& t) {
  if (!t.defined()) return nullptr;
  STRATA_CHECK(t.dtype == DType::bf16, "cuda backend: expected a bf16 tensor");
  return static_cast<__nv_bfloat16*>(t.data);
}
#endif
}  // namespace dispatch

}  // namespace strata
