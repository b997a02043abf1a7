#include "engine/op_scratch.h"

#include <algorithm>
#include <utility>

namespace strata {

const std::vector<std::string_view>& scratch_tags() {
  using namespace scratch_tag;
  static const std::vector<std::string_view> tags = {
      cublaslt,   attn_workspace, attn_unused_grad, grad_sums, grad_rows, grad_row_map, logits_chunk,  dlogits_chunk,
      token_loss, n_valid,        seq_parallel,     fp8_amax,  fp8_grad,  fp8_grad_t,   fp8_grad_scale};
  return tags;
}

bool is_scratch_tag(std::string_view tag) {
  const auto& t = scratch_tags();
  return std::find(t.begin(), t.end(), tag) != t.end();
}

ScratchList gemm_scratch() {
  return {{scratch_tag::cublaslt, DType::u8, Shape{int64_t(kGemmWorkspaceBytes)}}};
}

ScratchList attention_unused_grad_scratch(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& q,
                                          const Tensor& k, const Tensor& v) {
  ScratchList l;
  if (!dq.defined()) l.push_back({scratch_tag::attn_unused_grad, DType::bf16, q.shape});
  if (!dk.defined()) l.push_back({scratch_tag::attn_unused_grad, DType::bf16, k.shape});
  if (!dv.defined()) l.push_back({scratch_tag::attn_unused_grad, DType::bf16, v.shape});
  return l;
}

ScratchList attention_workspace_scratch(size_t bytes) {
  if (!bytes) return {};
  return {{scratch_tag::attn_workspace, DType::u8, Shape{int64_t(bytes)}}};
}

ScratchList grad_sums_scratch(int64_t n) {
  return {{scratch_tag::grad_sums, DType::f32, Shape{n}}};
}

int64_t embedding_grad_slots(int64_t tokens, int64_t vocab) {
  return std::min(tokens, vocab);
}

ScratchList embedding_grad_scratch(int64_t tokens, int64_t vocab, int64_t C) {
  const int64_t slots = embedding_grad_slots(tokens, vocab);
  return {{scratch_tag::grad_rows, DType::f32, Shape{slots, C}},
          {scratch_tag::grad_row_map, DType::i32, Shape{vocab + slots + 1}}};
}

ScratchList lm_head_ce_scratch(LmHeadPass pass, int64_t N, int64_t V, int64_t chunk) {
  const int64_t n_max = std::min(chunk, N);
  ScratchList l = {{scratch_tag::logits_chunk, DType::f32, Shape{n_max, V}}};
  if (pass != LmHeadPass::fwd) l.push_back({scratch_tag::dlogits_chunk, DType::bf16, Shape{n_max, V}});
  if (pass != LmHeadPass::bwd) l.push_back({scratch_tag::token_loss, DType::f32, Shape{N}});
  l.push_back({scratch_tag::n_valid, DType::f32, Shape{1}});
  return l;
}

ScratchSet::ScratchSet(Arena& arena, const ScratchList& specs) {
  bufs_.reserve(specs.size());
  for (const ScratchSpec& s : specs) {
    tags_.push_back(s.tag);
    bufs_.emplace_back(arena, s.dtype, s.shape, s.tag);
  }
}

ScratchSet& ScratchSet::operator=(ScratchSet&& o) noexcept {
  if (this != &o) {
    release();
    tags_ = std::move(o.tags_);
    bufs_ = std::move(o.bufs_);
  }
  return *this;
}

void ScratchSet::release() {
  while (!bufs_.empty()) bufs_.pop_back();
  tags_.clear();
}

Tensor ScratchSet::at(std::string_view tag) const {
  for (size_t i = 0; i < bufs_.size(); ++i)
    if (tag == tags_[i]) return bufs_[i].view();
  return Tensor();
}

}  // namespace strata
