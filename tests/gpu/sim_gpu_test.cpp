// The sim backend mirroring cuda against the cuda backend itself: for the tiny model and the
// 1B shape, one step's arena peak and its whole (delta, tag) allocation schedule must be equal,
// with the shipped profile's model of cuDNN's plan workspaces (checked shape by shape first
// against cuda::Attention, which is what strata-calibrate will record in a profile). Also prints forecast vs measured
// step time, the first data points of the accuracy study (not asserted: the profiles are not calibrated yet).
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu_test_util.h"
#include "kernels/attention_workspace.h"
#include "model/data/data.h"
#include "model/llama/shapes.h"
#include "model/plan/forecast.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"
#include "kernels/attention_cuda.h"

using namespace strata;

namespace {

// cuDNN's execution-plan workspaces for a shape, recovered from Attention::workspace_bytes.
AttnWorkspaceParams measured_attention_ws(int B, int T, int Hq, int Hkv, int D, size_t* fwd, size_t* bwd) {
  cuda::Attention a;
  cuda::AttnShape sh{B, T, Hq, Hkv, D};
  AttnWorkspaceParams p;
  *fwd = p.plan_fwd_bytes = a.workspace_bytes(sh, false);
  *bwd = a.workspace_bytes(sh, true);
  if (*bwd > 0) {
    const size_t with_acc = attention_cudnn_bwd_bytes(B, T, Hq, Hkv, D, 0, true);
    const size_t without = attention_cudnn_bwd_bytes(B, T, Hq, Hkv, D, 0, false);
    p.dq_accum = *bwd >= with_acc;
    p.plan_bwd_bytes = *bwd - (p.dq_accum ? with_acc : without);
  }
  std::printf(
      "attention B=%d T=%d Hq=%d Hkv=%d D=%d: path %s, plan ws fwd %zu B, bwd %zu B = 4*B*Hq*T*D %+lld "
      "(workspace total %zu), dq_accum %d\n",
      B, T, Hq, Hkv, D, a.path(sh), p.plan_fwd_bytes, p.plan_bwd_bytes,
      (long long)p.plan_bwd_bytes - 4LL * B * Hq * T * D, *bwd, int(p.dq_accum));
  return p;
}

AttnWorkspaceParams profile_ws(const DeviceProfile& p) {
  return {p.attention_plan_ws_fwd_bytes, p.attention_plan_ws_bwd_bytes, p.attention_plan_ws_bwd_gqa_copies,
          p.attention_dq_accum};
}

// The profile's workspace model must give what cuDNN asks for, shape by shape.
TEST(SimVsCuda, AttentionWorkspaceModelMatchesCudnn) {
  STRATA_REQUIRE_GPU();
  const AttnWorkspaceParams model = profile_ws(find_profile("h100_80gb"));
  struct S {
    int B, T, Hq, Hkv, D;
  };
  for (S s :
       {S{1, 37, 4, 2, 16}, S{2, 1000, 8, 8, 64}, S{1, 2048, 32, 8, 64}, S{1, 4096, 24, 8, 128}, S{2, 4096, 32, 8, 128},
        S{1, 16384, 32, 8, 64}, S{1, 4096, 32, 32, 128}, S{1, 8192, 64, 8, 128}, S{3, 333, 6, 3, 72},
        S{2, 1000, 12, 4, 96}, S{1, 3000, 10, 2, 80}, S{1, 2048, 8, 8, 160}, S{1, 4096, 16, 8, 256},
        S{1, 40960, 32, 8, 128}}) {  // the last past kAttentionTuneMaxT: the stand-in's tuning budget
    size_t fwd = 0, bwd = 0;
    measured_attention_ws(s.B, s.T, s.Hq, s.Hkv, s.D, &fwd, &bwd);
    EXPECT_EQ(attention_workspace_bytes(s.B, s.T, s.Hq, s.Hkv, s.D, false, model), fwd) << s.T << " " << s.D;
    EXPECT_EQ(attention_workspace_bytes(s.B, s.T, s.Hq, s.Hkv, s.D, true, model), bwd) << s.T << " " << s.D;
    // An overwriting backward takes no dq/dk/dv scratch, on both sides alike.
    cuda::Attention a;
    EXPECT_EQ(attention_workspace_bytes(s.B, s.T, s.Hq, s.Hkv, s.D, true, model, false),
              a.workspace_bytes(cuda::AttnShape{s.B, s.T, s.Hq, s.Hkv, s.D}, true, false))
        << s.T << " " << s.D;
  }
}

struct Case {
  std::string name;
  io::LlamaConfig model;
  int B, T;
  Plan plan;
  TrainMode mode;
  bool init_weights;  // the 1B shape skips the host-side random init (values change neither memory nor time)
  bool loss_grad_in_forward = true;  // false: the LM head's recomputing backward
  StateRecipe recipe = {};
  int grad_accum = 1;  // micro-batches a step, their gradients summed on the device
};

Plan with_state_level(Plan p, const char* level, Decision tier = Decision::host) {
  p.set_state_offloading(level, "test", tier);
  return p;
}

void compare(const Case& c, size_t budget) {
  ForecastRequest r;
  r.model = c.model;
  r.seq = c.T;
  r.batch = c.B;
  r.mode = c.mode;
  r.lora_rank = 8;
  r.plan = c.plan;
  r.loss_grad_in_forward = c.loss_grad_in_forward;
  r.recipe = c.recipe;
  r.grad_accum = c.grad_accum;
  r.profile = find_profile("h100_80gb");  // its attention workspace model, as shipped
  r.mirror = SimMirror::cuda;
  r.budget = budget;
  Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << c.name << ": " << f.oom;

  auto be = make_cuda_backend(budget);
  be->arena().set_logging(true);  // after the cuBLASLt workspace: the sim's log starts before it
  LlamaModel model(*be, c.model, forecast_model_options(r));
  if (c.init_weights) model.init_random(1);
  TrainOptions to;
  to.plan = c.plan;
  to.adam.lr = 1e-5f;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(size_t(c.B) * c.T * 4 + 16, c.model.vocab_size, 3), c.B, c.T);
  auto step = [&] {  // c.grad_accum micro-batches, as the forecast's step
    std::vector<Batch> micro;
    for (int i = 0; i < c.grad_accum; ++i) micro.push_back(data.next());
    return tr.step(micro, to.adam.lr);
  };
  StepStats first = step();
  // A step that leaves its streamed update to the next forward: the forecast reports a second step (which
  // applies it), its events follow the first's, and its peak is the larger of the two (model/plan/forecast.cpp).
  if (tr.optimizer().pending()) first.peak_device_bytes = std::max(first.peak_device_bytes, step().peak_device_bytes);
  std::vector<ArenaEvent> ev = be->arena().events();
  double best = 1e30;
  for (int s = 0; s < 3; ++s) best = std::min(best, step().seconds);  // after cuDNN's plan builds

  EXPECT_EQ(f.peak_bytes, first.peak_device_bytes) << c.name;
  // The persistent state's host bytes (its reservation and the disk tier's staging) and its state file.
  EXPECT_EQ(f.state_host_bytes, first.state_host_bytes) << c.name;
  EXPECT_EQ(f.state_disk_bytes, first.state_disk_bytes) << c.name;
  ASSERT_FALSE(f.events.empty());
  // The sim logged the cuBLASLt workspace at construction; the cuda backend had no log yet.
  ASSERT_EQ(f.events[0].tag, "workspace.cublaslt");
  ASSERT_EQ(f.events.size(), ev.size() + 1) << c.name;
  for (size_t i = 0; i < ev.size(); ++i) {
    ASSERT_EQ(f.events[i + 1].tag, ev[i].tag) << c.name << " event " << i;
    ASSERT_EQ(f.events[i + 1].delta, ev[i].delta) << c.name << " event " << i << " " << ev[i].tag;
  }
  std::printf(
      "%-22s peak sim %14zu cuda %14zu (%s) | high-water sim %zu cuda %zu | step forecast %.4f s, measured "
      "%.4f s (%.2fx)\n",
      c.name.c_str(), f.peak_bytes, first.peak_device_bytes, format_bytes(first.peak_device_bytes).c_str(),
      f.high_water_bytes, be->arena().high_water(), f.step_s, best, best / f.step_s);
}

io::LlamaConfig tiny() {
  io::LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 97;
  c.rms_norm_eps = 1e-5f;
  return c;
}
// The tiny shape as Qwen3 with attention_bias (q/k norms, four biased projections) and as Qwen2.
io::LlamaConfig tiny_arch(io::Arch a) {
  io::LlamaConfig c = tiny();
  c.arch = a;
  c.qk_norm = a == io::Arch::qwen3;
  c.qkv_bias = true;
  c.o_bias = a == io::Arch::qwen3;
  return c;
}

// The tiny shape with heads of another size, and yarn's or dynamic's rope (a table the batch's length picks; yarn's
// factor on cos and sin).
io::LlamaConfig tiny_heads(int head_dim, RopeType rope) {
  io::LlamaConfig c = tiny();
  c.head_dim = head_dim;
  c.max_position_embeddings = 32;
  c.rope_scaling.type = rope;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 16;
  return c;
}

TEST(SimVsCuda, TinyModelScheduleAndPeakAreEqual) {
  STRATA_REQUIRE_GPU();
  for (auto& c : std::vector<Case>{
           {"tiny keep", tiny(), 2, 37, Plan::keep_everything(), TrainMode::full, true},
           {"tiny gc1", tiny(), 2, 37, Plan::gradient_checkpointing(1), TrainMode::full, true},
           {"tiny selective", tiny(), 2, 37, Plan::selective_recompute(), TrainMode::full, true},
           {"tiny lora gc2", tiny(), 2, 37, Plan::gradient_checkpointing(2), TrainMode::lora, true},
           {"tiny frozen", tiny(), 2, 37, Plan::keep_everything(), TrainMode::frozen, true},
           {"tiny keep, loss bwd", tiny(), 2, 37, Plan::keep_everything(), TrainMode::full, true, false},
           {"tiny gc1, loss bwd", tiny(), 2, 37, Plan::gradient_checkpointing(1), TrainMode::full, true, false},
           {"tiny keep, none+bf16",
            tiny(),
            2,
            37,
            Plan::keep_everything(),
            TrainMode::full,
            true,
            true,
            {MasterWeights::none, OptimizerState::bf16}},
           {"tiny gc1, 8bit",
            tiny(),
            2,
            37,
            Plan::gradient_checkpointing(1),
            TrainMode::full,
            true,
            true,
            {MasterWeights::fp32, OptimizerState::q8}},
           {"tiny gc1, all host 8bit",
            tiny(),
            2,
            37,
            with_state_level(Plan::gradient_checkpointing(1), "all"),
            TrainMode::full,
            true,
            true,
            {MasterWeights::none, OptimizerState::q8}},
           {"tiny qwen3 keep", tiny_arch(io::Arch::qwen3), 2, 37, Plan::keep_everything(), TrainMode::full, true},
           {"tiny head dim 96, yarn, gc1", tiny_heads(96, RopeType::yarn), 2, 37, Plan::gradient_checkpointing(1),
            TrainMode::full, true},
           {"tiny head dim 256, dynamic, keep", tiny_heads(256, RopeType::dynamic), 2, 37, Plan::keep_everything(),
            TrainMode::full, true},
           {"tiny qwen3 gc1", tiny_arch(io::Arch::qwen3), 2, 37, Plan::gradient_checkpointing(1), TrainMode::full,
            true},
           {"tiny qwen2 lora gc2", tiny_arch(io::Arch::qwen2), 2, 37, Plan::gradient_checkpointing(2), TrainMode::lora,
            true},
           {"tiny gc1, master on disk", tiny(), 2, 37,
            with_state_level(Plan::gradient_checkpointing(1), "master", Decision::disk), TrainMode::full, true},
           {"tiny keep, all on disk 8bit",
            tiny(),
            2,
            37,
            with_state_level(Plan::keep_everything(), "all", Decision::disk),
            TrainMode::full,
            true,
            true,
            {MasterWeights::fp32, OptimizerState::q8}},
           {"tiny keep, optimizer host bf16",
            tiny(),
            2,
            37,
            with_state_level(Plan::keep_everything(), "optimizer"),
            TrainMode::full,
            true,
            true,
            {MasterWeights::fp32, OptimizerState::bf16}}})
    compare(c, size_t(1) << 30);
}

// gradients: bf16: the bf16 gradient buffers and the fp32 scratch of the norm, bias and embedding
// gradients (engine/op_scratch.h) are the cuda backend's, block for block, on every tier.
TEST(SimVsCuda, Bf16GradientsScheduleAndPeakAreEqual) {
  STRATA_REQUIRE_GPU();
  const StateRecipe g16{MasterWeights::fp32, OptimizerState::fp32, GradPrecision::bf16};
  const StateRecipe hf{MasterWeights::none, OptimizerState::bf16, GradPrecision::bf16};
  io::LlamaConfig tied = tiny();
  tied.tie_word_embeddings = true;
  for (auto& c : std::vector<Case>{
           {"bf16 grads keep", tiny(), 2, 37, Plan::keep_everything(), TrainMode::full, true, true, g16},
           {"bf16 grads loss bwd", tiny(), 2, 37, Plan::keep_everything(), TrainMode::full, true, false, g16},
           {"bf16 grads tied gc1", tied, 2, 37, Plan::gradient_checkpointing(1), TrainMode::full, true, true, g16},
           {"bf16 grads hf all host", tiny(), 2, 37, with_state_level(Plan::gradient_checkpointing(1), "all"),
            TrainMode::full, true, true, hf},
           {"bf16 grads qwen3 gc1", tiny_arch(io::Arch::qwen3), 2, 37, Plan::gradient_checkpointing(1), TrainMode::full,
            true, true, g16},
           {"bf16 grads qwen2 lora", tiny_arch(io::Arch::qwen2), 2, 37, Plan::gradient_checkpointing(2),
            TrainMode::lora, true, true, g16},
           {"bf16 grads frozen", tiny(), 2, 37, Plan::keep_everything(), TrainMode::frozen, true, true, g16}})
    compare(c, size_t(1) << 30);
}

// Gradient accumulation: every micro-batch's blocks, the gradients added to on the device, then one update.
TEST(SimVsCuda, MicroBatchesScheduleAndPeakAreEqual) {
  STRATA_REQUIRE_GPU();
  const StateRecipe hf{MasterWeights::none, OptimizerState::bf16, GradPrecision::bf16};
  Case keep3{"tiny keep x3", tiny(), 2, 37, Plan::keep_everything(), TrainMode::full, true};
  keep3.grad_accum = 3;
  Case gc2{"tiny gc1 x2, hf", tiny(), 2, 37, Plan::gradient_checkpointing(1), TrainMode::full, true, true, hf};
  gc2.grad_accum = 2;
  Case host2{"tiny keep x2, optimizer host",
             tiny(),
             2,
             37,
             with_state_level(Plan::keep_everything(), "optimizer"),
             TrainMode::full,
             true};
  host2.grad_accum = 2;
  Case lora2{
      "tiny qwen3 lora x2", tiny_arch(io::Arch::qwen3), 2, 37, Plan::gradient_checkpointing(2), TrainMode::lora, true};
  lora2.grad_accum = 2;
  Case big{"1B keep 2048 x2, hf",
           builtin_shape("Llama-3.2-1B"),
           1,
           2048,
           Plan::keep_everything(),
           TrainMode::full,
           false,
           true,
           hf};
  big.grad_accum = 2;
  for (const Case& c : {keep3, gc2, host2, lora2}) compare(c, size_t(1) << 30);
  compare(big, size_t(48) << 30);
}

TEST(SimVsCuda, Llama1BScheduleAndPeakAreEqual) {
  STRATA_REQUIRE_GPU();
  const io::LlamaConfig m = builtin_shape("Llama-3.2-1B");
  for (auto& c :
       std::vector<Case>{{"1B keep 2048", m, 1, 2048, Plan::keep_everything(), TrainMode::full, false},
                         {"1B gc1 4096", m, 1, 4096, Plan::gradient_checkpointing(1), TrainMode::full, false},
                         {"1B lora sel 4096", m, 1, 4096, Plan::selective_recompute(), TrainMode::lora, false},
                         {"1B gc1 16384", m, 1, 16384, Plan::gradient_checkpointing(1), TrainMode::full, false},
                         {"1B keep 4096, loss bwd", m, 1, 4096, Plan::keep_everything(), TrainMode::full, false, false},
                         {"1B keep 4096", m, 1, 4096, Plan::keep_everything(), TrainMode::full, false},
                         {"Qwen3-1.7B gc1 4096", builtin_shape("Qwen3-1.7B"), 1, 4096, Plan::gradient_checkpointing(1),
                          TrainMode::full, false}})
    compare(c, size_t(48) << 30);
}

}  // namespace

#else
TEST(SimVsCuda, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without the cuda backend";
}
#endif
