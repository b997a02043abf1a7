// The parameters of ops that the layers above the kernels name: the engine's Backend, io's config reader and
// the model pass these; kernels/ implements the ops (kernels/adamw.h, block_copy.h, rope.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/tensor.h"

namespace strata {

// Tensors per launch of the cuda backend's list-form optimizer kernels (kernels/adamw.cu, grad_norm.cu); the sim
// charges one launch per this many.
constexpr int kOptimizerListTensors = 48;
inline int optimizer_list_launches(size_t tensors) {
  return int((tensors + kOptimizerListTensors - 1) / kOptimizerListTensors);
}

// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW semantics).
struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// One AdamW step's tensors (Backend::adamw_step). `master`: the fp32 master weights; `param_out` (may be undefined)
// receives the updated weights in the compute dtype. With a split master (`master` of dtype i16, see
// Backend::master_dtype()) param_out is required: it holds the master's high half and is read as well as written.
// Without a master (master_weights: none, engine/state_recipe.h) param_out is the weights, read, updated in fp32 and
// written back rounded. The moments' dtype says their precision: f32, bf16, or u8 codes with f32 scales
// m_scale/v_scale [quant_blocks(n)] (kernels/quant8.h).
struct AdamWSlot {
  Tensor master, m, v, g, param_out;
  Tensor m_scale, v_scale;  // 8-bit moments only
};

// A strided copy of blocks: the layout changes around sequence parallelism's all-to-alls (engine/ops/seq.cpp) and
// GQA's KV-head replication. `outer` x `inner` blocks of `e` contiguous elements; block (i, j) goes from
// in + i * in_outer + j * in_inner to out + i * out_outer + j * out_inner (strides in elements), and is added into
// out when `accumulate` (a gradient's later write), else overwrites it. Blocks must not overlap in out.
// Example: swapping the two leading axes of [a, b, e] into [b, a, e] is BlockCopy::swap_axes(a, b, e).
struct BlockCopy {
  int64_t outer = 1, inner = 1, e = 1;
  int64_t in_outer = 0, in_inner = 0;    // elements between blocks of in
  int64_t out_outer = 0, out_inner = 0;  // elements between blocks of out
  // One past the last element read / written (0 for no blocks).
  int64_t in_span() const { return count() ? (outer - 1) * in_outer + (inner - 1) * in_inner + e : 0; }
  int64_t out_span() const { return count() ? (outer - 1) * out_outer + (inner - 1) * out_inner + e : 0; }
  int64_t count() const { return outer * inner * e; }  // elements copied
  // in [a, b, e] -> out [b, a, e]: out[j, i, :] = in[i, j, :].
  static BlockCopy swap_axes(int64_t a, int64_t b, int64_t e) { return {a, b, e, b * e, e, e, a * e}; }
};

// The rope types of transformers' rope_scaling / rope_parameters that strata runs ("default" is plain).
enum class RopeType : uint8_t { plain, linear, dynamic, yarn, longrope, llama3 };

// rope_scaling / rope_parameters as in config.json. Scalars transformers evaluates in Python are
// doubles; a field a type does not read keeps its default.
struct RopeScaling {
  RopeType type = RopeType::plain;
  double factor = 1.0;            // every type but plain; longrope: 0 when absent (max_position_embeddings / original)
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_max_position_embeddings = 8192;  // llama3, yarn, longrope
  // yarn and longrope: the factor on cos and sin; 0 when absent (derived from factor, mscale, mscale_all_dim).
  double attention_factor = 0.0;
  // yarn: the ramp's bounds in rotations (0: absent, 32 and 1), the attention factor's pair (0: absent) and
  // whether the ramp's ends round outwards to whole dimensions.
  double beta_fast = 0.0, beta_slow = 0.0, mscale = 0.0, mscale_all_dim = 0.0;
  bool truncate = true;
  std::vector<float> short_factor, long_factor;  // longrope: [head_dim/2] each

  bool operator==(const RopeScaling&) const = default;
};

// The rope table of one batch: inv_freq [D/2] and the factor on cos and sin (1 but for yarn and longrope).
// dynamic and longrope depend on the batch's length (largest position + 1) as transformers' dynamic_rope_update
// decides; the other types ignore it.
struct RopeTableKey {
  int max_position_embeddings = 0;  // config.json's (dynamic's reference length, longrope's default factor)
  // The batch's length (largest position + 1); dynamic: the length its table last grew to (transformers'
  // max_seq_len_cached), unscaled up to max_position_embeddings. 0: no batch yet (transformers' table at init).
  int seq_len = 0;
};

// The RopeTableKey::seq_len after a batch of length seq_len, from the one the table holds (`held`), as
// transformers' dynamic_rope_update decides: dynamic grows to the longest length seen past max_position_embeddings
// and resets below it; longrope switches between its short and long factors at original_max_position_embeddings;
// the other types keep `held`.
int rope_table_length(const RopeScaling& s, int max_position_embeddings, int held, int seq_len);

}  // namespace strata

namespace strata::cpu {
// inv_freq[i] = 1 / theta^(2i/D), then the frequency scaling of `scaling.type`, exactly as transformers 5 computes
// it (kernels/rope_cpu.cpp). Defined in kernels: the model builds its rope table on the host with it.
void rope_inv_freq(float* inv_freq, int D, float theta, const RopeScaling& scaling, const RopeTableKey& key = {});
// The factor transformers multiplies cos and sin by (its attention_scaling): yarn's and longrope's, else 1.
float rope_attention_factor(const RopeScaling& scaling, int max_position_embeddings);
}  // namespace strata::cpu
