// One case per OpKind on odd shapes (rows 37, features 5/13, heads 3), run the same way on any backend: the
// table-driven op tests (tests/cpu/op_table_test.cpp, tests/gpu/op_table_gpu_test.cpp) iterate these.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace strata::test {

// in: random input (differentiable); idx: i32 in [lo, hi); param: f32 input; out: forward output in the loss;
// aux: forward side output; dout: the loss weights of spec `of`; grad: the gradient of spec `of`; inout: read and
// written in place (in the loss); codes: u8 the case's calls write and read (FP8 codes), neither uploaded nor
// compared.
enum class Role { in, idx, param, out, aux, dout, grad, inout, codes };
struct Spec {
  Role role;
  Shape shape;
  bool f32 = false;  // f32 on every backend (else the compute dtype)
  int of = -1;       // dout, grad: the spec it belongs to
  int lo = 0, hi = 0;
  bool positive = false;  // random values in (0, 1]
};
using Run = std::function<void(Backend&, const std::vector<Tensor>&)>;
struct OpCase {
  OpKind kind;
  std::string label;
  std::vector<Spec> specs;
  Run fwd, bwd;  // bwd empty: no backward to check
  // The backward is the derivative of the forward (central differences on cpu); false for FP8's straight-through
  // gradients of a quantised forward (tests/cpu/fp8_test.cpp bounds those).
  bool differentiable = true;
};

inline bool is_input(Role r) {
  return r == Role::in || r == Role::idx || r == Role::param || r == Role::inout;
}

inline std::vector<OpCase> op_cases() {
  const int N = 37, C = 5, F = 13, V = 13, vocab = 11;
  using R = Role;
  std::vector<OpCase> c;
  c.push_back({OpKind::embedding,
               "embedding",
               {{R::idx, {N}, false, -1, 0, V},
                {R::in, {V, C}},
                {R::out, {N, C}},
                {R::dout, {N, C}, false, 2},
                {R::grad, {V, C}, true, 1}},
               [](Backend& b, const std::vector<Tensor>& t) { b.embedding_fwd(t[2], t[0], t[1]); },
               [](Backend& b, const std::vector<Tensor>& t) { b.embedding_bwd(t[4], t[3], t[0], false); }});
  c.push_back({OpKind::rmsnorm,
               "rmsnorm",
               {{R::in, {N, F}},
                {R::in, {F}},
                {R::out, {N, F}},
                {R::aux, {N}, true},
                {R::dout, {N, F}, false, 2},
                {R::grad, {N, F}, false, 0},
                {R::grad, {F}, true, 1}},
               [](Backend& b, const std::vector<Tensor>& t) { b.rmsnorm_fwd(t[2], t[3], t[0], t[1], 1e-5f); },
               [](Backend& b, const std::vector<Tensor>& t) {
                 b.rmsnorm_bwd(t[5], t[6], t[4], t[0], t[1], t[3], false, false);
               }});
  c.push_back(
      {OpKind::linear,
       "linear",
       {{R::in, {N, C}},
        {R::in, {F, C}},
        {R::out, {N, F}},
        {R::dout, {N, F}, false, 2},
        {R::grad, {N, C}, false, 0},
        {R::grad, {F, C}, true, 1}},
       [](Backend& b, const std::vector<Tensor>& t) { b.linear_fwd(t[2], t[0], t[1]); },
       [](Backend& b, const std::vector<Tensor>& t) { b.linear_bwd(t[4], t[5], t[3], t[0], t[1], false, false); }});
  c.push_back(
      {OpKind::rope,
       "rope",
       {{R::in, {N, 3, 6}},
        {R::idx, {N}, false, -1, 0, 50},
        {R::param, {3}, true},
        {R::out, {N, 3, 6}},
        {R::dout, {N, 3, 6}, false, 3},
        {R::grad, {N, 3, 6}, false, 0}},
       // cos and sin scaled by an attention factor (yarn's default at factor 4), forward and backward.
       [](Backend& b, const std::vector<Tensor>& t) { b.rope_fwd(t[3], t[0], t[1], t[2], 1.1386294f); },
       [](Backend& b, const std::vector<Tensor>& t) { b.rope_bwd(t[5], t[4], t[1], t[2], false, 1.1386294f); }});
  // B 2, T 7, 3 query heads over 1 kv head (GQA), head_dim 8 (cuDNN's smallest).
  c.push_back({OpKind::attention,
               "attention",
               {{R::in, {2, 7, 3, 8}},
                {R::in, {2, 7, 1, 8}},
                {R::in, {2, 7, 1, 8}},
                {R::out, {2, 7, 3, 8}},
                {R::aux, {2, 3, 7}, true},
                {R::dout, {2, 7, 3, 8}, false, 3},
                {R::grad, {2, 7, 3, 8}, false, 0},
                {R::grad, {2, 7, 1, 8}, false, 1},
                {R::grad, {2, 7, 1, 8}, false, 2}},
               [](Backend& b, const std::vector<Tensor>& t) { b.attention_fwd(t[3], t[4], t[0], t[1], t[2], {}); },
               [](Backend& b, const std::vector<Tensor>& t) {
                 b.attention_bwd(t[6], t[7], t[8], t[5], t[0], t[1], t[2], t[3], t[4], false, false, false, {});
               }});
  c.push_back(
      {OpKind::swiglu,
       "swiglu",
       {{R::in, {N, F}},
        {R::in, {N, F}},
        {R::out, {N, F}},
        {R::dout, {N, F}, false, 2},
        {R::grad, {N, F}, false, 0},
        {R::grad, {N, F}, false, 1}},
       [](Backend& b, const std::vector<Tensor>& t) { b.swiglu_fwd(t[2], t[0], t[1]); },
       [](Backend& b, const std::vector<Tensor>& t) { b.swiglu_bwd(t[4], t[5], t[3], t[0], t[1], false, false); }});
  c.push_back({OpKind::add,
               "add",
               {{R::in, {N, F}},
                {R::in, {N, F}},
                {R::out, {N, F}},
                {R::dout, {N, F}, false, 2},
                {R::grad, {N, F}, false, 0},
                {R::grad, {N, F}, false, 1}},
               [](Backend& b, const std::vector<Tensor>& t) { b.add_fwd(t[2], t[0], t[1], 0.5f); },
               [](Backend& b, const std::vector<Tensor>& t) { b.add_bwd(t[4], t[5], t[3], 0.5f, false, false); }});
  c.push_back({OpKind::bias,
               "bias",
               {{R::inout, {N, F}}, {R::in, {F}}, {R::dout, {N, F}, false, 0}, {R::grad, {F}, true, 1}},
               [](Backend& b, const std::vector<Tensor>& t) { b.bias_fwd(t[0], t[1]); },
               [](Backend& b, const std::vector<Tensor>& t) { b.bias_bwd(t[3], t[2], false); }});
  // w [V, C] with `vocab` real rows; targets in [-1, vocab): -1 is ignored.
  c.push_back(
      {OpKind::lm_head_ce,
       "lm_head_ce",
       {{R::in, {N, C}},
        {R::in, {V, C}},
        {R::idx, {N}, false, -1, -1, vocab},
        {R::out, {1}, true},
        {R::aux, {N}, true},
        {R::dout, {1}, true, 3},
        {R::grad, {N, C}, false, 0},
        {R::grad, {V, C}, true, 1}},
       [=](Backend& b, const std::vector<Tensor>& t) { b.lm_head_ce_fwd(t[3], t[4], t[0], t[1], t[2], 16, vocab); },
       [=](Backend& b, const std::vector<Tensor>& t) {
         b.lm_head_ce_bwd(t[6], t[7], t[5], t[0], t[1], t[2], t[4], 16, vocab, false, false);
       }});
  c.push_back({OpKind::lm_head_logits,
               "lm_head_logits",
               {{R::in, {N, C}}, {R::in, {V, C}}, {R::out, {N, V}, true}},
               [](Backend& b, const std::vector<Tensor>& t) { b.lm_head_logits(t[2], t[0], t[1]); },
               {}});
  // No master (the weights updated in place), f32 moments, no clipping.
  c.push_back({OpKind::adamw,
               "adamw",
               {{R::inout, {N, F}},
                {R::inout, {N, F}, true},
                {R::inout, {N, F}, true, -1, 0, 0, true},
                {R::param, {N, F}, true},
                {R::param, {1}, true, -1, 0, 0, true}},
               [](Backend& b, const std::vector<Tensor>& t) {
                 Backend::AdamWSlot s;
                 s.param_out = t[0], s.m = t[1], s.v = t[2], s.g = t[3];
                 b.adamw_step(s, t[4], 0.0f, AdamWParams{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f}, 3);
               },
               {}});
  c.push_back({OpKind::grad_norm,
               "grad_norm",
               {{R::inout, {1}, true, -1, 0, 0, true}, {R::param, {N, F}, true}},
               [](Backend& b, const std::vector<Tensor>& t) { b.grad_norm_sq(t[0], t[1]); },
               {}});
  // [37, 3, 5] -> [3, 37, 5], added into the output.
  c.push_back(
      {OpKind::block_copy,
       "block_copy",
       {{R::in, {N, 3, C}}, {R::inout, {3, N, C}}},
       [=](Backend& b, const std::vector<Tensor>& t) { b.block_copy(t[1], t[0], BlockCopy::swap_axes(N, 3, C), true); },
       {}});
  // FP8 (engine/fp8.h): shapes multiples of 16, as cuBLASLt's FP8 GEMMs want; the cast's scale block compared.
  const int N8 = 48, I8 = 80, O8 = 112;
  c.push_back({OpKind::fp8_cast,
               "fp8_cast",
               {{R::in, {N8, I8}}, {R::codes, {N8, I8}}, {R::codes, {I8, N8}}, {R::aux, {4}, true}},
               [](Backend& b, const std::vector<Tensor>& t) { b.fp8_cast(t[1], t[2], t[3], t[0], 0); },
               {}});
  c.push_back({OpKind::linear_fp8,
               "linear_fp8",
               {{R::in, {N8, I8}},
                {R::in, {O8, I8}},
                {R::codes, {N8, I8}},
                {R::codes, {I8, N8}},
                {R::aux, {4}, true},
                {R::out, {N8, O8}},
                {R::dout, {N8, O8}, false, 5},
                {R::grad, {N8, I8}, false, 0},
                {R::grad, {O8, I8}, true, 1},
                {R::codes, {O8, I8}},
                {R::codes, {I8, O8}},
                {R::aux, {4}, true}},
               [](Backend& b, const std::vector<Tensor>& t) {
                 b.fp8_cast(t[2], t[3], t[4], t[0], 0);
                 b.fp8_cast(t[9], t[10], t[11], t[1], 0);
                 b.linear_fp8_fwd(t[5], t[2], t[4], t[9], t[11]);
               },
               [](Backend& b, const std::vector<Tensor>& t) {
                 b.linear_fp8_bwd(t[7], t[8], t[6], t[3], t[4], t[10], t[11], false, false);
               },
               false});
  return c;
}

// One case's tensors on one backend, and its host data (inputs rounded to bf16 so every backend reads the same).
struct OpRig {
  Backend& be;
  const OpCase& oc;
  std::vector<Buffer> bufs;
  std::vector<Tensor> t;
  std::vector<std::vector<float>> host;  // per spec: inputs and douts (i32 values held as floats)

  OpRig(Backend& b, const OpCase& c, uint32_t seed) : be(b), oc(c) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < c.specs.size(); ++i) {
      const Spec& s = c.specs[i];
      const DType dt = s.role == Role::codes            ? DType::u8
                       : s.role == Role::idx            ? DType::i32
                       : s.f32 || s.role == Role::param ? DType::f32
                                                        : b.compute_dtype();
      bufs.emplace_back(b.arena(), dt, s.shape, "case." + c.label + "." + std::to_string(i));
      t.push_back(bufs.back().view());
      std::vector<float> h(size_t(s.shape.numel()));
      for (float& x : h) {
        if (s.role == Role::idx)
          x = float(std::uniform_int_distribution<int>(s.lo, s.hi - 1)(rng));
        else if (s.positive)
          x = std::uniform_real_distribution<float>(0.05f, 1.0f)(rng);
        else
          x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
        if (s.role != Role::idx) x = bf16_to_f32(f32_to_bf16(x));
      }
      host.push_back(std::move(h));
    }
  }
  void upload(size_t i) {
    if (oc.specs[i].role == Role::idx) {
      std::vector<int32_t> v(host[i].begin(), host[i].end());
      be.upload_i32(t[i], v.data());
    } else {
      be.upload_f32(t[i], host[i].data());
    }
  }
  void forward() {
    for (size_t i = 0; i < t.size(); ++i)
      if (is_input(oc.specs[i].role)) upload(i);
    oc.fwd(be, t);
  }
  void backward() {
    for (size_t i = 0; i < t.size(); ++i)
      if (oc.specs[i].role == Role::dout) upload(i);
    oc.bwd(be, t);
  }
  std::vector<float> get(size_t i) {
    std::vector<float> v(size_t(t[i].numel()));
    be.download_f32(v.data(), t[i]);
    return v;
  }
  // sum over the outputs of dout . out (the loss the gradients are of).
  double loss() {
    double l = 0;
    for (size_t i = 0; i < t.size(); ++i)
      if (oc.specs[i].role == Role::dout) {
        const std::vector<float> o = get(size_t(oc.specs[i].of));
        for (size_t j = 0; j < o.size(); ++j) l += double(o[j]) * double(host[i][j]);
      }
    return l;
  }
};

}  // namespace strata::test
