// The sim backend runs the engine's own tape and allocator: mirroring the cpu backend, one step's
// arena peak and its whole (delta, tag) allocation schedule equal the cpu backend's, byte for
// byte, for every preset and for LoRA. The budget planner's plan fits on the sim and on cpu;
// strata-plan forecasts the built-in shapes and reports bad input clearly.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/cost_model.h"
#include "kernels/attention_workspace.h"
#include "kernels/backend_sim.h"
#include "model/data.h"
#include "model/forecast.h"
#include "model/planner.h"
#include "model/timeline_svg.h"
#include "model/train_config.h"

using namespace strata;

namespace {

const size_t kBudget = size_t(64) << 20;

io::LlamaConfig tiny_config() {
  io::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 61;
  c.rms_norm_eps = 1e-5f;
  return c;
}

ForecastRequest tiny_request(Plan plan, TrainMode mode = TrainMode::full) {
  ForecastRequest r;
  r.model = tiny_config();
  r.seq = 19;
  r.batch = 2;
  r.mode = mode;
  r.lora_rank = 4;
  r.loss_chunk_tokens = 16;  // several chunks per step
  r.plan = std::move(plan);
  r.profile = find_profile("h100_80gb");
  r.mirror = SimMirror::cpu;
  r.budget = kBudget;
  return r;
}

struct CpuStep {
  bool fits = true;
  size_t peak = 0, high_water = 0;
  std::vector<ArenaEvent> events;
};

// The same construction and one step on the real cpu backend, with real weights and tokens.
CpuStep cpu_step(const ForecastRequest& r, size_t budget, const Plan& plan) {
  auto be = make_cpu_backend(budget);
  be->arena().set_logging(true);
  LlamaModel model(*be, r.model, forecast_model_options(r));
  model.init_random(5);
  TrainOptions to;
  to.plan = plan;
  Trainer tr(*be, model, to);
  TokenBatcher data(synthetic_tokens(4000, r.model.vocab_size, 3), r.batch, r.seq);
  CpuStep out;
  try {
    out.peak = tr.step(data.next()).peak_device_bytes;
  } catch (const OutOfMemoryError&) {
    out.fits = false;
  }
  out.high_water = be->arena().high_water();
  out.events = be->arena().events();
  return out;
}

void expect_same_schedule(const std::vector<ArenaEvent>& sim, const std::vector<ArenaEvent>& cpu,
                          const std::string& what) {
  ASSERT_EQ(sim.size(), cpu.size()) << what << ": different number of arena events";
  for (size_t i = 0; i < sim.size(); ++i) {
    ASSERT_EQ(sim[i].delta, cpu[i].delta)
        << what << ": event " << i << " (" << sim[i].tag << " vs " << cpu[i].tag << ")";
    ASSERT_EQ(sim[i].tag, cpu[i].tag) << what << ": event " << i;
    ASSERT_EQ(sim[i].in_use, cpu[i].in_use) << what << ": event " << i;
  }
}

TEST(Sim, MirrorCpuPeakAndScheduleEqualTheCpuBackend) {
  struct Case {
    std::string name;
    Plan plan;
    TrainMode mode;
    bool paged = false;  // layer_offloading: the weight pager's host block and two device slots
  };
  std::vector<Case> cases = {
      {"keep", Plan::keep_everything(), TrainMode::full},
      {"gc1", Plan::gradient_checkpointing(1), TrainMode::full},
      {"gc2", Plan::gradient_checkpointing(2), TrainMode::full},
      {"selective", Plan::selective_recompute(), TrainMode::full},
      {"lora keep", Plan::keep_everything(), TrainMode::lora},
      {"lora gc1", Plan::gradient_checkpointing(1), TrainMode::lora},
      {"frozen selective", Plan::selective_recompute(), TrainMode::frozen},
      {"offload", Plan::activation_offloading(Decision::host), TrainMode::full},
      {"legacy", Plan::activation_offloading(Decision::host, true), TrainMode::full},
      {"hidden_states", Plan::hidden_states(), TrainMode::full},
      {"frozen paged keep", Plan::keep_everything(), TrainMode::frozen, true},
      {"frozen paged gc1", Plan::gradient_checkpointing(1), TrainMode::frozen, true},
      {"lora paged offload", Plan::activation_offloading(Decision::host), TrainMode::lora, true}};
  for (auto& c : cases) {
    ForecastRequest r = tiny_request(c.plan, c.mode);
    r.layer_offloading = c.paged;
    Forecast f = forecast(r);
    ASSERT_TRUE(f.fits) << c.name << ": " << f.oom;
    CpuStep cpu = cpu_step(r, kBudget, c.plan);
    ASSERT_TRUE(cpu.fits) << c.name;
    EXPECT_EQ(f.peak_bytes, cpu.peak) << c.name;
    EXPECT_EQ(f.high_water_bytes, cpu.high_water) << c.name;
    expect_same_schedule(f.events, cpu.events, c.name);
    // The breakdown accounts for every byte at the peak.
    size_t sum = 0;
    for (auto& it : f.breakdown) sum += it.bytes;
    EXPECT_EQ(sum, f.peak_bytes) << c.name;
    EXPECT_GT(f.step_s, 0) << c.name;
    EXPECT_NEAR(f.forward_s + f.backward_s + f.optimizer_s, f.step_s, 1e-12) << c.name;
    // Replays happen exactly where recompute time is charged (frozen selective saves no norm output).
    EXPECT_EQ(f.recompute_s > 0, f.recomputed_nodes > 0) << c.name;
    if (c.name == "gc1" || c.name == "selective") {
      EXPECT_GT(f.recomputed_nodes, 0) << c.name;
    }
    // The host tier: slots offloaded and loaded back; paged layers uploaded from the pager's block.
    const bool offloads =
        c.name == "offload" || c.name == "legacy" || c.name == "hidden_states" || c.name == "lora paged offload";
    EXPECT_EQ(f.peak_host_slot_bytes > 0, offloads) << c.name;
    EXPECT_EQ(f.offloaded_bytes, f.loaded_bytes) << c.name;
    EXPECT_EQ(f.paged_host_bytes > 0, c.paged) << c.name;
    EXPECT_EQ(f.paged_uploads > 0, c.paged) << c.name;
    EXPECT_EQ(f.peak_host_bytes, f.peak_host_slot_bytes + f.paged_host_bytes) << c.name;
  }
}

TEST(Sim, HostTierOverlapsOnTheCopyStream) {
  auto cuda_request = [](Plan p) {
    ForecastRequest r = tiny_request(std::move(p));
    r.mirror = SimMirror::cuda;
    r.budget = 0;
    return r;
  };
  Forecast keep = forecast(cuda_request(Plan::keep_everything()));
  Forecast off = forecast(cuda_request(Plan::activation_offloading(Decision::host)));
  Forecast legacy = forecast(cuda_request(Plan::activation_offloading(Decision::host, true)));
  ASSERT_TRUE(off.fits && legacy.fits && keep.fits);
  EXPECT_LT(off.saved_bytes, keep.saved_bytes);
  EXPECT_GT(off.peak_host_bytes, 0u);
  EXPECT_GT(off.copy_busy_s, 0);
  EXPECT_NEAR(off.copy_busy_s, legacy.copy_busy_s, 1e-12);  // same copies
  // Synchronous copies stall compute for every transfer; overlapped ones hide some of it.
  EXPECT_LE(off.step_s, legacy.step_s);
  EXPECT_GE(off.step_s, keep.step_s);
  EXPECT_GT(legacy.copy_wait_s, 0);
  // Weight paging on the cuda mirror: bf16 pages, uploads overlapped, slots in the breakdown.
  ForecastRequest pr = cuda_request(Plan::keep_everything());
  pr.mode = TrainMode::frozen;
  pr.layer_offloading = true;
  Forecast paged = forecast(pr);
  ASSERT_TRUE(paged.fits) << paged.oom;
  EXPECT_GT(paged.paged_bytes_uploaded, 0u);
  bool has_slots = false;
  for (auto& it : paged.breakdown) has_slots = has_slots || it.name == "weights (paged layer slots)";
  EXPECT_TRUE(has_slots);
}

TEST(Sim, DiskTierIsRefused) {
  EXPECT_THROW(forecast(tiny_request(Plan::activation_offloading(Decision::disk))), UnsupportedError);
  ForecastRequest full = tiny_request(Plan::keep_everything());
  full.layer_offloading = true;  // paging needs a frozen base
  EXPECT_THROW(forecast(full), UnsupportedError);
}

TEST(Sim, RecomputeCostsTimeAndSavesMemory) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  Forecast gc = forecast(tiny_request(Plan::gradient_checkpointing(1)));
  EXPECT_LT(gc.peak_bytes, keep.peak_bytes);
  EXPECT_GT(gc.step_s, keep.step_s);
  EXPECT_EQ(keep.recompute_s, 0);
  EXPECT_NEAR(gc.step_s - keep.step_s, gc.recompute_s, 1e-9);
}

TEST(Sim, MirrorCudaMakesTheCudaBackendsAllocations) {
  ForecastRequest r = tiny_request(Plan::keep_everything());
  r.mirror = SimMirror::cuda;
  r.budget = 0;
  Forecast f = forecast(r);
  ASSERT_TRUE(f.fits) << f.oom;
  ASSERT_FALSE(f.events.empty());
  EXPECT_EQ(f.events[0].tag, "workspace.cublaslt");
  EXPECT_EQ(f.events[0].delta, int64_t(32) << 20);
  const io::LlamaConfig c = tiny_config();
  AttnWorkspaceParams wp{r.profile.attention_plan_ws_fwd_bytes, r.profile.attention_plan_ws_bwd_bytes,
                         r.profile.attention_plan_ws_bwd_gqa_copies, r.profile.attention_dq_accum};
  const int Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
  const size_t attn_fwd = attention_workspace_bytes(r.batch, r.seq, Hq, Hkv, D, false, wp);
  const size_t attn_bwd = attention_workspace_bytes(r.batch, r.seq, Hq, Hkv, D, true, wp);
  ASSERT_GT(attn_fwd, 0u);
  ASSERT_GT(attn_bwd, attn_fwd);
  std::map<std::string, int> allocs;
  std::map<size_t, int> attn_sizes;
  for (size_t i = f.step_first_event; i < f.events.size(); ++i) {
    if (f.events[i].delta <= 0) continue;
    allocs[f.events[i].tag]++;
    if (f.events[i].tag == "workspace.attn") attn_sizes[size_t(f.events[i].delta)]++;
  }
  // One forward and one backward workspace per layer (keep everything: no replays).
  EXPECT_EQ(attn_sizes[(attn_fwd + 255) / 256 * 256], c.num_hidden_layers);
  EXPECT_EQ(attn_sizes[(attn_bwd + 255) / 256 * 256], c.num_hidden_layers);
  EXPECT_EQ(attn_sizes.size(), 2u);
  EXPECT_EQ(allocs["loss.logits_chunk"], 2);
  EXPECT_EQ(allocs["loss.dlogits_chunk"], 1);
  bool has_compute = false;
  for (auto& it : f.breakdown) has_compute = has_compute || it.name == "weights.compute";
  EXPECT_TRUE(has_compute);
  // bf16 activations: half the cpu mirror's saved bytes.
  Forecast fc = forecast(tiny_request(Plan::keep_everything()));
  EXPECT_LT(f.saved_bytes, fc.saved_bytes);
}

TEST(Sim, ProfilesOnDiskMatchTheBuiltIns) {
  const std::string dir = std::string(STRATA_TEST_DATA) + "/../profiles/";
  for (auto& [name, p] : builtin_profiles()) {
    DeviceProfile disk = load_profile(dir + name + ".json");
    EXPECT_EQ(profile_to_json(disk), profile_to_json(p)) << name;
    EXPECT_NE(disk.source.find("not calibrated"), std::string::npos) << name;
  }
  EXPECT_THROW(profile_from_json("{\"name\": \"x\"}", "x.json"), ConfigError);
}

TEST(Planner, ChosenPlanFitsTheBudgetOnSimAndOnCpu) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  Forecast gc = forecast(tiny_request(Plan::gradient_checkpointing(1)));
  ASSERT_LT(gc.peak_bytes, keep.peak_bytes);
  for (double frac : {0.25, 0.6, 0.9}) {
    const size_t budget = gc.high_water_bytes + size_t(frac * double(keep.high_water_bytes - gc.high_water_bytes));
    PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), budget);
    ASSERT_TRUE(pr.found) << "budget " << budget;
    EXPECT_LE(pr.forecast.peak_bytes, budget);
    EXPECT_LE(pr.forecast.high_water_bytes, budget);
    EXPECT_LE(pr.forecast.step_s, gc.step_s + 1e-12) << "slower than plain checkpointing";
    CpuStep cpu = cpu_step(tiny_request(pr.plan), budget, pr.plan);
    EXPECT_TRUE(cpu.fits) << pr.label;
    EXPECT_LE(cpu.peak, budget) << pr.label;
    EXPECT_EQ(cpu.peak, pr.forecast.peak_bytes) << pr.label;

    // The printed YAML gives strata-train the same plan, shape and budget.
    std::string yaml = plan_yaml(tiny_request(pr.plan), pr.plan, pr.forecast, budget);
    TrainConfig tc;
    apply_yaml_text(tc, yaml, "plan.yaml");
    EXPECT_EQ(tc.seq, 19);
    EXPECT_EQ(tc.batch, 2);
    EXPECT_EQ(tc.loss_chunk_tokens, 16);
    EXPECT_EQ(tc.device_budget_bytes, budget);
    auto be = make_cpu_backend(kBudget);
    LlamaModel model(*be, tiny_config(), {});
    Trainer t(*be, model, {});
    for (auto& row : t.plan_table(2, 19)) {
      for (int l = 0; l < tiny_config().num_hidden_layers; ++l) {
        std::string cls = row.cls.rfind("L*", 0) == 0 ? "L" + std::to_string(l) + row.cls.substr(2) : row.cls;
        EXPECT_EQ(tc.plan.decide(cls), pr.plan.decide(cls)) << cls << "\n" << yaml;
      }
    }
    CpuStep from_yaml = cpu_step(tiny_request(tc.plan), tc.device_budget_bytes, tc.plan);
    EXPECT_TRUE(from_yaml.fits);
    EXPECT_EQ(from_yaml.peak, pr.forecast.peak_bytes);
  }
}

TEST(Planner, KeepEverythingWhenItFits) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), keep.high_water_bytes);
  ASSERT_TRUE(pr.found);
  EXPECT_EQ(pr.label, "keep everything");
  EXPECT_EQ(pr.forecast.recompute_s, 0);
}

TEST(Planner, BudgetTooSmallNamesTheMinimum) {
  Forecast keep = forecast(tiny_request(Plan::keep_everything()));
  const size_t budget = keep.persistent_bytes + 1024;
  PlanResult pr = plan_for_budget(tiny_request(Plan::keep_everything()), budget);
  ASSERT_FALSE(pr.found);
  EXPECT_GT(pr.minimum_bytes, budget);
  // The minimum is real: the lowest-memory plan fits it on the sim and on cpu.
  ForecastRequest r = tiny_request(pr.plan);
  r.budget = pr.minimum_bytes;
  EXPECT_TRUE(forecast(r).fits);
  EXPECT_TRUE(cpu_step(r, pr.minimum_bytes, pr.plan).fits);
}

TEST(Forecast, UnknownModelNameListsTheKnownOnes) {
  try {
    resolve_model("Llama-9-9000B");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Llama-3.2-1B"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Llama-3-70B"), std::string::npos) << e.what();
  }
}

TEST(Forecast, SvgTimelineHasPhasesAndPeak) {
  Forecast f = forecast(tiny_request(Plan::gradient_checkpointing(1)));
  std::string svg = timeline_svg(f, "tiny <gc>", kBudget);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("backward"), std::string::npos);
  EXPECT_NE(svg.find("tiny &lt;gc&gt;"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

// --- strata-plan end to end.

struct Proc {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Proc run_plan(const std::string& args) {
  static int n = 0;
  const std::string dir = ::testing::TempDir();
  const std::string o = dir + "sim_test_out" + std::to_string(n), e = dir + "sim_test_err" + std::to_string(n);
  ++n;
  const std::string cmd = std::string(STRATA_BUILD_DIR) + "/tools/strata-plan " + args + " >" + o + " 2>" + e;
  int st = std::system(cmd.c_str());
  Proc p;
  p.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  p.out = slurp(o);
  p.err = slurp(e);
  return p;
}

TEST(StrataPlan, ForecastsABuiltInShapeWithoutAGpu) {
  const std::string svg = ::testing::TempDir() + "sim_test_1b.svg";
  Proc p = run_plan("--model Llama-3.2-1B --seq 4096 --batch 1 --json --svg " + svg);
  ASSERT_EQ(p.code, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  const auto& f = j["forecast"];
  EXPECT_GT(f["peak_bytes"].get<size_t>(), size_t(20) << 30);  // 1.24B params: weights + grads + Adam alone
  EXPECT_GT(f["tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(j["profile"]["calibrated"].get<bool>());
  EXPECT_EQ(slurp(svg).rfind("<svg", 0), 0u);
}

TEST(StrataPlan, BudgetPrintsAConfigStrataTrainAccepts) {
  const std::string cfg = ::testing::TempDir() + "sim_test_plan.yaml";
  Proc p = run_plan("--model Llama-3.2-1B --seq 8192 --budget 40GiB --write-config " + cfg);
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("plan:"), std::string::npos) << p.out;
  TrainConfig tc;
  apply_yaml(tc, cfg);
  EXPECT_EQ(tc.seq, 8192);
  EXPECT_EQ(tc.device_budget_bytes, size_t(40) << 30);
  // Forecasting the written config again fits the same budget.
  Proc again = run_plan("--model Llama-3.2-1B --config " + cfg + " --json");
  ASSERT_EQ(again.code, 0) << again.err;
  auto j = nlohmann::json::parse(again.out);
  EXPECT_LE(j["forecast"]["high_water_bytes"].get<size_t>(), size_t(40) << 30);
}

TEST(StrataPlan, BadInput) {
  Proc unknown = run_plan("--model Llama-9-9000B --seq 128");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("known: Llama-3.2-1B"), std::string::npos) << unknown.err;

  Proc small = run_plan("--model Llama-3.2-1B --seq 4096 --budget 8GiB");
  EXPECT_EQ(small.code, 1);
  EXPECT_NE(small.err.find("nothing fits a device budget of 8.00 GiB"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("needs at least"), std::string::npos) << small.err;

  Proc other = run_plan("--model tiny --seq 64 --device-name 'NVIDIA H200'");
  EXPECT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("warning: the profile 'NVIDIA H100 80GB HBM3' is for another GPU"), std::string::npos)
      << other.err;
  Proc same = run_plan("--model tiny --seq 64 --profile h200 --device-name 'NVIDIA H200'");
  EXPECT_EQ(same.err.find("warning"), std::string::npos) << same.err;

  Proc both = run_plan("--model tiny --seq 64 --preset keep --budget 1GiB");
  EXPECT_EQ(both.code, 2);

  Proc disk = run_plan("--model tiny --seq 64 --preset disk");
  EXPECT_EQ(disk.code, 2);
  EXPECT_NE(disk.err.find("disk tier"), std::string::npos) << disk.err;
}

TEST(StrataPlan, HostTierPresetsAndLayerOffloading) {
  for (std::string preset : {"offload", "legacy", "hidden_states"}) {
    Proc p = run_plan("--model tiny --seq 64 --preset " + preset + " --host-budget 1GiB --json");
    ASSERT_EQ(p.code, 0) << preset << ": " << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_GT(j["forecast"]["peak_host_bytes"].get<size_t>(), 0u) << preset;
    EXPECT_EQ(j["host_budget"].get<size_t>(), size_t(1) << 30) << preset;
    EXPECT_TRUE(j["fits_host_budget"].get<bool>()) << preset;
  }
  Proc paged = run_plan("--model tiny --seq 64 --mode frozen --layer-offloading");
  ASSERT_EQ(paged.code, 0) << paged.err;
  EXPECT_NE(paged.out.find("peak host memory"), std::string::npos) << paged.out;
  EXPECT_NE(paged.out.find("weight pager"), std::string::npos) << paged.out;
  Proc small = run_plan("--model tiny --seq 64 --preset offload --host-budget 1KiB");
  EXPECT_EQ(small.code, 0) << small.err;
  EXPECT_NE(small.out.find("does NOT fit the host budget"), std::string::npos) << small.out;
}

}  // namespace
