// Causal grouped-query attention on the GPU (bf16 in/out, fp32 softmax statistics).
// Same contract as kernels/attention.h (cpu reference): q, out [B, T, Hq, D]; k, v [B, T, Hkv, D]
// (BSHD, contiguous); lse [B, Hq, T] = natural-log log-sum-exp of the scaled scores
// (max + log(sum exp(s - max)), s = q.k / sqrt(D)); query head h reads kv head h / (Hq / Hkv).
//
// Two paths, chosen per shape:
//  - "cudnn": cuDNN's fused flash attention, reached through the backend graph API as the
//    matmul / pointwise / reduction graph it pattern-matches (the SDPA_FWD/BWD operation
//    descriptors of cuDNN 9.13+/9.17+ have no causal mask before 9.21, so they are not used).
//    Execution plans are built once per shape and cached. Needs cuDNN >= 9.0, D % 8 == 0, D <= 256.
//  - "fallback: <reason>": attention_flash.cu, a tiled flash-style kernel on CUDA cores
//    (fp32 math, any D <= 128, deterministic, no workspace).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace strata::cuda {

using bf16 = __nv_bfloat16;

struct AttnShape {
  int B, T, Hq, Hkv, D;
};

class Attention {
 public:
  Attention();  // cheap: the cuDNN handle is created at first use on the then-current device
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // Bytes of `ws` that fwd/bwd need for this shape (0 on the fallback path). For backward on the
  // cudnn path this includes cuDNN's plan workspace, its fp32 dQ accumulator [B, Hq, T, D] and
  // softmax-sum [B, Hq, T], plus bf16 scratch for dq/dk/dv used when accumulate = true.
  // A backward that overwrites the gradients (accumulate = false) needs less: no dq/dk/dv scratch.
  size_t workspace_bytes(const AttnShape& s, bool backward, bool accumulate = true);

  // out [B, T, Hq, D] and lse [B, Hq, T] are overwritten.
  void fwd(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s, void* ws,
           size_t ws_bytes, cudaStream_t st);

  // accumulate = true: dq/dk/dv += gradient (the engine's convention); false: overwritten.
  // out and lse are the forward's (either path's lse is valid for either path's backward).
  void bwd(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
           const float* lse, const AttnShape& s, bool accumulate, void* ws, size_t ws_bytes, cudaStream_t st);

  // Which cuDNN engine config runs the shape ("engine 6 k24=26 ..."; the backward also names its
  // graph variant), or the path when it is not cuDNN. The plan is tuned on the first call of a
  // shape: every candidate config whose workspace fits (attention_tune_budget) is timed on the
  // call's own buffers and the fastest is kept (past kAttentionTuneMaxT tokens, on a stand-in of that
  // length: attention_workspace.h). STRATA_ATTN_TUNE=0 keeps cuDNN's heuristic pick;
  // STRATA_ATTN_VERBOSE=1 prints the candidates and their times.
  std::string plan_label(const AttnShape& s, bool backward) const;

  // "cudnn" or "fallback: <reason>"; builds (and caches) the plans for the shape to decide.
  // The pointer stays valid for the lifetime of this object.
  const char* path(const AttnShape& s) const;

  // Wall seconds this process has spent building cuDNN plans: a shape's first use builds its forward graph
  // and, with tuning on, every backward variant that finalizes (a long shape also its stand-in's), each with
  // every candidate engine config. strata-calibrate measures it per shape (attention_plan_build_s).
  static double plan_build_seconds();
  static double last_plan_build_seconds();  // the latest shape's

  // Tests use it to run the fallback where cuDNN would run. Process-wide.
  static void set_force_fallback(bool force);
  // Tests: run candidate `index` (engine config x graph variant, in heuristic order) of the tuner's
  // list instead of the tuned pick, so every plan the tuner may choose is checked; -1 = the pick.
  // Process-wide. candidate_count: the list's length for a shape (0 off the cudnn path).
  static void set_force_candidate(bool backward, int index);
  size_t candidate_count(const AttnShape& s, bool backward);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Fallback kernels (attention_flash.cu). Throw UnsupportedError for D > 128.
// Also the sample-packing path: `pos` [B*T] device i32 (positions restarting at 0 per example)
// confines query i to keys [i - pos[i], i] (kernels/attention.h); null: one causal sequence a row.
void flash_attention_fwd(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s,
                         cudaStream_t st, const int32_t* pos = nullptr);
void flash_attention_bwd(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                         const bf16* out, const float* lse, const AttnShape& s, bool accumulate, cudaStream_t st,
                         const int32_t* pos = nullptr);
// y[i] += x[i] for n bf16 values (fp32 add, one rounding).
void add_bf16_inplace(bf16* y, const bf16* x, size_t n, cudaStream_t st);

}  // namespace strata::cuda
