// Residual adds go backward by aliasing gradient buffers (engine/tape.h, GradAlias) instead of
// running add_bwd: the same losses, gradients and weights bit for bit as with the kernel, under
// keep, recompute and host plans and with adapters; no add_bwd runs for the model's residual adds;
// and graphs where a borrowed gradient would be added into, freed or written while still to be
// read fall back to the kernel, with the same bits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/llama/rng.h"
#include "model/train/trainer.h"
#include "tests/cpu/run_result.h"
#include "tests/cpu/tiny_model.h"

using namespace strata;

namespace {

// The cpu backend, counting add_bwd calls (and those that write da).
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> in) : in_(std::move(in)) {}
  long add_bwd_calls = 0, add_bwd_da_calls = 0;

  std::string_view name() const override { return in_->name(); }
  Arena& arena() override { return in_->arena(); }
  bool supports(OpKind op, DType dtype) const override { return in_->supports(op, dtype); }
  DType compute_dtype() const override { return in_->compute_dtype(); }
  void upload_f32(Tensor dst, const float* src) override { in_->upload_f32(dst, src); }
  void download_f32(float* dst, Tensor src) override { in_->download_f32(dst, src); }
  void upload_i32(Tensor dst, const int32_t* src) override { in_->upload_i32(dst, src); }
  DType master_dtype() const override { return in_->master_dtype(); }
  void upload_master(Tensor lo, Tensor hi, const float* src) override { in_->upload_master(lo, hi, src); }
  void download_master(float* dst, Tensor lo, Tensor hi) override { in_->download_master(dst, lo, hi); }
  void zero(Tensor t) override { in_->zero(t); }
  void fill(Tensor t, float value) override { in_->fill(t, value); }
  void synchronize() override { in_->synchronize(); }
  size_t device_used_bytes() override { return in_->device_used_bytes(); }
  std::string device_name() override { return in_->device_name(); }
  std::unique_ptr<HostReservation> reserve_host(size_t bytes) override { return in_->reserve_host(bytes); }
  CopyTicket copy_to_host_async(void* dst, Tensor src, CopyLane lane) override {
    return in_->copy_to_host_async(dst, src, lane);
  }
  CopyTicket copy_to_device_async(Tensor dst, const void* src, CopyLane lane) override {
    return in_->copy_to_device_async(dst, src, lane);
  }
  bool copy_done(CopyTicket t) override { return in_->copy_done(t); }
  void copy_wait_host(CopyTicket t) override { in_->copy_wait_host(t); }
  void copy_wait_compute(CopyTicket t) override { in_->copy_wait_compute(t); }
  std::unique_ptr<DiskFile> open_disk_file(const std::string& dir, size_t bytes) override {
    return in_->open_disk_file(dir, bytes);
  }
  // The table-dispatched ops, counting add's backward.
  void run(OpKind k, const OpCall& c) override {
    if (k == OpKind::add && c.backward) add_bwd_calls++, add_bwd_da_calls += c.t[0].defined();
    in_->run(k, c);
  }

 private:
  std::unique_ptr<Backend> in_;
};

constexpr int kSteps = 2;

struct TrainRun {
  test_util::RunResult r;
  long add_bwd = 0;
  TapeStats last;  // the last step's tape statistics
};

TrainRun train(bool aliasing, const Plan& plan, ModelOptions mo = {}) {
  CountingBackend be(make_cpu_backend(size_t(64) << 20));
  LlamaModel model(be, test_util::tiny_config(), mo);
  model.init_random(11);
  TrainOptions to;
  to.adam.lr = 1e-2f;
  to.plan = plan;
  to.tiers.offload_dir = ::testing::TempDir();
  Trainer tr(be, model, to);
  tr.tape().set_grad_aliasing(aliasing);
  TokenBatcher data(synthetic_tokens(4000, 61, 3), 2, 19);
  TrainRun out;
  for (int s = 0; s < kSteps; ++s) {
    StepStats st = tr.step(data.next());
    out.r.losses.push_back(st.loss);
    out.r.peak = std::max(out.r.peak, st.peak_device_bytes);
  }
  out.last = tr.tape().stats();
  out.add_bwd = be.add_bwd_calls;
  test_util::capture(out.r, be, model);
  return out;
}

TEST(GradAlias, ResidualAddsRunNoKernelAndGiveTheKernelsBits) {
  const int L = test_util::tiny_config().num_hidden_layers;
  for (const Plan& p : {Plan::keep_everything(), Plan::gradient_checkpointing(1), Plan::selective_recompute(),
                        Plan::activation_offloading(Decision::host)}) {
    TrainRun off = train(false, p), on = train(true, p);
    test_util::expect_bit_identical(off.r, on.r, p.preset);
    EXPECT_EQ(off.add_bwd, 2L * L * kSteps) << p.preset << ": the two residual adds of each layer";
    EXPECT_EQ(off.last.grad_moves, 0) << p.preset;
    EXPECT_EQ(on.add_bwd, 0) << p.preset;
    EXPECT_EQ(on.last.grad_passes, 2L * L) << p.preset;
    EXPECT_EQ(on.last.grad_moves, 2L * L) << p.preset;
    EXPECT_LE(on.r.peak, off.r.peak) << p.preset << ": aliasing allocates no gradient";
  }
}

TEST(GradAlias, AdaptersWithScaleOneAndAFrozenBaseGiveTheKernelsBits) {
  // alpha == rank: the adapter adds (y + 1 * B A x) pass gradients too. o_proj's is the residual
  // add's second input, so that one's gradient is a borrowed view the adapter add reads; layer
  // 0's base output and input need no gradient (frozen embedding and norms): the kernel runs.
  ModelOptions lora;
  lora.train_base = false;
  lora.lora.rank = 4;
  lora.lora.alpha = 4.0f;
  lora.lora.target_modules = {"q_proj", "o_proj", "down_proj"};
  for (const Plan& p : {Plan::keep_everything(), Plan::gradient_checkpointing(1)}) {
    TrainRun off = train(false, p, lora), on = train(true, p, lora);
    test_util::expect_bit_identical(off.r, on.r, "lora " + p.preset);
    EXPECT_GT(on.last.grad_passes, 0) << p.preset;
    EXPECT_LT(on.add_bwd, off.add_bwd) << p.preset;
  }
}

// Hand-made graphs on one tape: every parameter's gradient with aliasing on and off, and what the
// tape and the backend did.
struct GraphRun {
  std::vector<std::vector<float>> grads;
  TapeStats stats;
  long add_bwd = 0, add_bwd_da = 0;
};

constexpr int kN = 6, kC = 8, kV = 13;

// `build` records the graph from the parameters p[0..4] ([kC, kC] weights and [kC] norm weight
// p[3], [kV, kC] head p[4]) and the input x [kN, kC]; it returns the loss input [kN, kC].
template <class Build>
GraphRun run_graph(bool aliasing, Build build) {
  CountingBackend be(make_cpu_backend(size_t(16) << 20));
  Rng rng(7);
  const Shape shapes[] = {Shape{kC, kC}, Shape{kC, kC}, Shape{kC, kC}, Shape{kC}, Shape{kV, kC}, Shape{kN, kC}};
  std::vector<Buffer> val, grad;
  for (const Shape& s : shapes) {
    std::vector<float> h(size_t(s.numel()));
    for (auto& v : h) v = float(0.5 * rng.normal());
    val.emplace_back(be.arena(), DType::f32, s, "p");
    grad.emplace_back(be.arena(), DType::f32, s, "g");
    be.upload_f32(val.back().view(), h.data());
  }
  Buffer tgt(be.arena(), DType::i32, Shape{kN}, "t");
  const std::vector<int32_t> th = {3, 0, 12, 7, 7, 1};
  be.upload_i32(tgt.view(), th.data());
  GraphRun out;
  {
    Tape t(be);
    TapeGuard guard(t);
    t.set_grad_aliasing(aliasing);
    std::vector<VId> p;
    for (size_t i = 0; i < val.size(); ++i) p.push_back(t.param(fmt::format("p{}", i), val[i].view(), grad[i].view()));
    VId h = build(t, p);
    ops::lm_head_ce(t, h, p[4], t.input("targets", tgt.view()), 4);
    t.apply_plan(Plan::keep_everything());
    t.forward();
    t.backward();
    out.stats = t.stats();
  }
  for (auto& g : grad) {
    out.grads.emplace_back(size_t(g.view().numel()));
    be.download_f32(out.grads.back().data(), g.view());
  }
  out.add_bwd = be.add_bwd_calls;
  out.add_bwd_da = be.add_bwd_da_calls;
  return out;
}

template <class Build>
GraphRun expect_same_bits(const std::string& what, Build build) {
  GraphRun off = run_graph(false, build), on = run_graph(true, build);
  EXPECT_EQ(off.stats.grad_moves, 0) << what;
  for (size_t i = 0; i < off.grads.size(); ++i)
    EXPECT_EQ(std::memcmp(off.grads[i].data(), on.grads[i].data(), off.grads[i].size() * 4), 0)
        << what << ": gradient of p" << i << " differs with aliasing";
  return on;
}

TEST(GradAlias, AnotherWriterOfAsGradientBetweenBsProducerAndTheAddRunsTheKernelForB) {
  // a = x W0, b = x W1 (p_b), r = rmsnorm(a) reads a after p_b: borrowing would let r's backward
  // add into the buffer before p_b's backward reads b's gradient from it. The second add's first
  // input s comes after the producer of its second input (r): its gradient, freed by the add
  // before r's backward, must not be borrowed either.
  GraphRun on = expect_same_bits("reader between", [](Tape& t, const std::vector<VId>& p) {
    VId a = ops::linear(t, p[5], p[0], "a"), b = ops::linear(t, p[5], p[1], "b");
    VId r = ops::rmsnorm(t, a, p[3], 1e-5f, "r").first;
    VId s = ops::add(t, a, b, 1.0f, "s");
    return ops::add(t, s, r, 1.0f, "out");
  });
  EXPECT_EQ(on.stats.grad_moves, 2);
  EXPECT_EQ(on.stats.grad_passes, 0);
  EXPECT_EQ(on.add_bwd, 2);
  EXPECT_EQ(on.add_bwd_da, 0) << "the first inputs took the output gradient over";
}

TEST(GradAlias, ASecondInputWithAnotherReaderRunsTheKernelForIt) {
  // b is read by the first add and by rmsnorm: its gradient gets two writes, so it needs its own
  // buffer. Here the other reader comes last: its backward writes b's gradient first.
  GraphRun on = expect_same_bits("b read twice", [](Tape& t, const std::vector<VId>& p) {
    VId a = ops::linear(t, p[5], p[0], "a"), b = ops::linear(t, p[5], p[1], "b");
    VId s = ops::add(t, a, b, 1.0f, "s");
    VId r = ops::rmsnorm(t, b, p[3], 1e-5f, "r").first;
    return ops::add(t, s, r, 1.0f, "out");  // r read once, s made before r: this one passes
  });
  EXPECT_EQ(on.stats.grad_moves, 2);
  EXPECT_EQ(on.stats.grad_passes, 1);
  EXPECT_EQ(on.add_bwd, 1);
  EXPECT_EQ(on.add_bwd_da, 0);
  // The other reader first: its backward runs after the add's and would write b's gradient
  // into a fresh buffer, adding (b's first write happened) to garbage.
  on = expect_same_bits("b read before", [](Tape& t, const std::vector<VId>& p) {
    VId a = ops::linear(t, p[5], p[0], "a"), b = ops::linear(t, p[5], p[1], "b");
    VId r = ops::rmsnorm(t, b, p[3], 1e-5f, "r").first;
    return ops::add(t, ops::add(t, a, b, 1.0f, "s"), r, 1.0f, "out");
  });
  EXPECT_EQ(on.stats.grad_moves, 2);
  EXPECT_EQ(on.stats.grad_passes, 0);
  EXPECT_EQ(on.add_bwd, 2);
}

TEST(GradAlias, BComputedFromAOrAReadTwiceRunsTheKernel) {
  // a + f(a): f's backward would add into the very buffer it reads its output gradient from.
  GraphRun on = expect_same_bits("a + f(a)", [](Tape& t, const std::vector<VId>& p) {
    VId a = ops::linear(t, p[5], p[0], "a");
    return ops::add(t, a, ops::linear(t, a, p[1], "f"), 1.0f, "out");
  });
  EXPECT_EQ(on.stats.grad_passes, 0);
  EXPECT_EQ(on.add_bwd, 1);
  // a + a: one value, two gradients into it.
  on = expect_same_bits("a + a", [](Tape& t, const std::vector<VId>& p) {
    VId a = ops::linear(t, p[5], p[0], "a");
    return ops::add(t, a, a, 1.0f, "out");
  });
  EXPECT_EQ(on.stats.grad_moves, 0);
  EXPECT_EQ(on.add_bwd_da, 1);
  // A scaled add is no pass-through.
  on = expect_same_bits("a + 0.5 b", [](Tape& t, const std::vector<VId>& p) {
    return ops::add(t, ops::linear(t, p[5], p[0], "a"), ops::linear(t, p[5], p[1], "b"), 0.5f, "out");
  });
  EXPECT_EQ(on.stats.grad_moves, 0);
  EXPECT_EQ(on.add_bwd_da, 1);
}

TEST(GradAlias, ChainedResidualsPassAndAFrozenSecondInputGetsNothing) {
  // The model's shape, x = x + f(norm(x)): x's other reader, the norm, comes before f.
  GraphRun on = expect_same_bits("chain", [](Tape& t, const std::vector<VId>& p) {
    VId x = ops::linear(t, p[5], p[0], "x");
    for (int l = 0; l < 3; ++l) {
      VId n = ops::rmsnorm(t, x, p[3], 1e-5f, fmt::format("n{}", l)).first;
      x = ops::add(t, x, ops::linear(t, n, p[1 + l % 2], fmt::format("f{}", l)), 1.0f, fmt::format("x{}", l));
    }
    // A second input that wants no gradient (an input, not a parameter): the move is all.
    return ops::add(t, x, t.input("frozen", t.value(p[5]).ext), 1.0f, "y");
  });
  EXPECT_EQ(on.stats.grad_passes, 4);
  EXPECT_EQ(on.add_bwd, 0);
}

}  // namespace
