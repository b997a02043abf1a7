// Workspace bytes of the cuda attention as a pure function of the shape, so the sim backend can
// reproduce the arena allocations of kernels/backend_cuda.cpp without a GPU.
//
// Mirrors kernels/attention_cudnn_cuda.cpp: the cudnn path is taken when D % 8 == 0 and D <= 256
// (else the flash fallback, which needs no workspace); forward needs cuDNN's plan workspace,
// backward the layout of BwdLayout there: [plan ws][softmax_sum fp32 B·Hq·T][dQ accumulator fp32
// B·Hq·T·D, when the dq_accum plan variant is used][dq, dk, dv bf16 scratch], each 256-aligned.
// cuDNN's plan workspace is only known at run time (cudnnBackendGetAttribute on the finalized
// plan), so it is a parameter here, carried by DeviceProfile. Measured with cuDNN 9.14 on an H200
// (tests/gpu/sim_gpu_test.cpp, 9 shapes, D 16-128, T 37-16384, MHA and GQA): 256 B forward;
// backward 256 B plus, when Hq != Hkv, one fp32 [B, Hq, T, D] buffer, 256-aligned (the
// per-query-head dK/dV before the group sum). The cuda backend could report the real one.
// Keep this in step with BwdLayout if that layout changes.
//
// Plan tuning: the plan-ws region is max(cuDNN's own pick's workspace, attention_tune_budget), and
// the tuner only times candidates whose workspace fits it, so the arena's workspace does not depend
// on which plan wins (or on whether tuning is on).
#pragma once
#include <algorithm>
#include <cstddef>

namespace strata {

inline size_t attention_align256(size_t x) {
  return (x + 255) & ~size_t(255);
}

struct AttnWorkspaceParams {
  size_t plan_fwd_bytes = 0;    // cuDNN execution-plan workspace, forward graph
  size_t plan_bwd_bytes = 0;    // same, backward graph: a constant part ...
  int plan_bwd_gqa_copies = 0;  // ... plus, when Hq != Hkv, this many fp32 [B, Hq, T, D] buffers
  bool dq_accum = true;         // backward plan variant with the fp32 dQ accumulator (tried first)
  size_t plan_bwd(int B, int T, int Hq, int Hkv, int D) const {
    const size_t gqa = Hq != Hkv ? attention_align256(size_t(B) * Hq * T * D * 4) : 0;
    return plan_bwd_bytes + size_t(plan_bwd_gqa_copies) * gqa;
  }
};

// Plan tuning times every candidate several times, and one attention call grows with T^2: at 524,288
// tokens of an 8B's heads a backward call takes seconds, and timing every candidate on the call itself
// would cost minutes before the first step. Longer sequences are therefore tuned on a stand-in of
// B = 1 and T = kAttentionTuneMaxT (the same heads) on a prefix of the call's own buffers, and run the
// candidate with the stand-in's winning engine config and graph variant. Which candidate runs never
// changes the workspace (the region, attention_tune_budget below), so the arena and the sim do not depend on it.
constexpr int kAttentionTuneMaxT = 32768;

// The shape whose timings pick the plan of (B, T): itself up to kAttentionTuneMaxT, else the stand-in.
inline bool attention_tunes_by_stand_in(int T) {
  return T > kAttentionTuneMaxT;
}

// Plan-ws bytes the tuner may use beyond cuDNN's own pick: two fp32 [B, Hq, T, D] buffers in backward (what
// cuDNN 9.19's newer engines ask for: a dQ accumulator and the per-query-head dK/dV), nothing extra in forward.
// Past kAttentionTuneMaxT the stand-in's (its plans are the ones timed, and the call runs the winner only where it
// fits its own region, else cuDNN's own pick): a long sequence would otherwise hold 8 bytes a query element for
// plans it never times, 16 GiB at 524,288 tokens of an 8B's heads where cuDNN's own plan needs 8.
inline size_t attention_tune_budget(int B, int T, int Hq, int Hkv, int D, bool backward) {
  (void)Hkv;
  if (!backward) return 0;
  if (attention_tunes_by_stand_in(T)) {
    B = 1;
    T = kAttentionTuneMaxT;
  }
  return 2 * attention_align256(size_t(B) * Hq * T * D * 4);
}

inline bool attention_uses_cudnn(int head_dim) {
  return head_dim % 8 == 0 && head_dim <= 256;
}

// BwdLayout::total of attention_cudnn_cuda.cpp, or with accumulate = false BwdLayout::sdq: the dq/dk/dv scratch
// at its end is only written by a backward that adds to the gradients (cuDNN overwrites its outputs), so an
// overwriting call takes none of it (6 GiB at 524,288 tokens of an 8B's heads).
inline size_t attention_cudnn_bwd_bytes(int B, int T, int Hq, int Hkv, int D, size_t plan_ws, bool dq_accum,
                                        bool accumulate = true) {
  const size_t rows = size_t(B) * Hq * T;
  const size_t nq = rows * D, nkv = size_t(B) * Hkv * T * D;
  const size_t head =
      attention_align256(plan_ws) + attention_align256(rows * 4) + (dq_accum ? attention_align256(nq * 4) : 0);
  return accumulate ? head + attention_align256(nq * 2) + 2 * attention_align256(nkv * 2) : head;
}

// What Attention::workspace_bytes returns (0 = no allocation: the backend allocates nothing); `accumulate`: whether
// the backward adds to the gradients (the forward's bytes do not depend on it).
inline size_t attention_workspace_bytes(int B, int T, int Hq, int Hkv, int D, bool backward,
                                        const AttnWorkspaceParams& p, bool accumulate = true) {
  if (!attention_uses_cudnn(D)) return 0;
  const size_t pick = backward ? p.plan_bwd(B, T, Hq, Hkv, D) : p.plan_fwd_bytes;
  const size_t region = std::max(pick, attention_tune_budget(B, T, Hq, Hkv, D, backward));
  return backward ? attention_cudnn_bwd_bytes(B, T, Hq, Hkv, D, region, p.dq_accum, accumulate) : region;
}

}  // namespace strata
