// The sim backend runs the engine's own tape and allocator: mirroring the cpu backend, one step's
// arena peak and its whole (delta, tag) allocation schedule equal the cpu backend's, byte for
// byte, for every preset (the disk tier's peak too) and for LoRA. The disk tier costs time at the
// profile's disk bandwidth. (strata-plan end to end: strata_plan_test.cpp; the planner itself:
// planner_test.cpp.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "engine/backend_sim.h"
#include "engine/cost_model.h"
#include "kernels/attention_workspace.h"
#include "kernels/tune_costs.h"
#include "model/data/data.h"
#include "model/plan/forecast.h"
#include "model/plan/timeline_svg.h"
#include "sim_twin.h"
#include "tiny_model.h"

using namespace strata;

namespace {

using namespace sim_twin;
using test_util::tiny_config;

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
    bool paged = false;          // layer_offloading: the weight pager's host block and two device slots
    bool small_staging = false;  // one slot of disk staging: every disk write is waited for before the next
    int mlp_tiles = 1;           // the MLP over row tiles (ops::mlp_tiled): its scratch blocks in the schedule
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
      {"lora paged offload", Plan::activation_offloading(Decision::host), TrainMode::lora, true},
      {"disk", Plan::activation_offloading(Decision::disk), TrainMode::full},
      {"disk small staging", Plan::activation_offloading(Decision::disk), TrainMode::full, false, true},
      {"lora paged disk", Plan::activation_offloading(Decision::disk), TrainMode::lora, true},
      {"gc1 mlp tiles", Plan::gradient_checkpointing(1), TrainMode::full, false, false, 3},
      {"selective mlp tiles", Plan::selective_recompute(), TrainMode::full, false, false, 5}};
  for (auto& c : cases) {
    ForecastRequest r = tiny_request(c.plan, c.mode);
    r.plan.layer_weights = c.paged ? Decision::page : Decision::keep;
    r.mlp_tiles = c.mlp_tiles;
    if (c.small_staging) r.tiers.max_inflight_bytes = 8192, r.tiers.prefetch_bytes = 16384;
    Forecast f = forecast(r);
    ASSERT_TRUE(f.fits) << c.name << ": " << f.oom;
    CpuStep cpu = cpu_step(r, kBudget, c.plan);
    ASSERT_TRUE(cpu.fits) << c.name;
    EXPECT_EQ(f.peak_bytes, cpu.peak) << c.name;
    EXPECT_EQ(f.high_water_bytes, cpu.high_water) << c.name;
    EXPECT_EQ(f.peak_disk_bytes, cpu.disk_peak) << c.name;
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
    // The disk tier stages through it and writes and reads every slot back (4 KiB-padded).
    const bool disk = c.plan.preset == "activation_offloading: disk";
    const bool offloads = disk || c.name == "offload" || c.name == "legacy" || c.name == "hidden_states" ||
                          c.name == "lora paged offload";
    EXPECT_EQ(f.peak_host_slot_bytes > 0, offloads) << c.name;
    EXPECT_EQ(f.offloaded_bytes, f.loaded_bytes) << c.name;
    EXPECT_EQ(f.peak_disk_bytes > 0, disk) << c.name;
    EXPECT_EQ(f.disk_written_bytes, f.disk_read_bytes) << c.name;
    EXPECT_GE(f.disk_written_bytes, disk ? f.offloaded_bytes : 0) << c.name;
    EXPECT_EQ(f.disk_busy_s > 0, disk) << c.name;
    // Reads run while compute goes on (SlotStore::prefetch): waits at most the drive's busy time, none without disk.
    EXPECT_LE(f.disk_wait_s, disk ? f.disk_busy_s : 0.0) << c.name;
    EXPECT_EQ(f.paged_host_bytes > 0, c.paged) << c.name;
    EXPECT_EQ(f.paged_uploads > 0, c.paged) << c.name;
    EXPECT_EQ(f.peak_host_bytes, f.peak_host_slot_bytes + f.paged_host_bytes + f.state_host_bytes) << c.name;
    // The pager's and the state's pinning come at load; the slot store's and the tuning inside the first step.
    const double gbps = r.profile.pinned_alloc_gbps * 1e9;
    EXPECT_NEAR(f.load_pinned_s, double(f.paged_host_bytes + f.state_host_bytes) / gbps, 1e-9) << c.name;
    EXPECT_NEAR(f.first_step_extra_s, double(f.host_reserved_bytes) / gbps + f.setup_tuning_s, 1e-9) << c.name;
    EXPECT_DOUBLE_EQ(f.first_step_s(), f.step_s + f.first_step_extra_s) << c.name;
    EXPECT_EQ(f.load_pinned_s > 0, c.paged || f.state_host_bytes > 0) << c.name;
  }
}

// Offloaded slots' device blocks go back at program points (SlotStore::release_held), not when their
// copies land: a link 1000x slower changes the step time and the stalls, never the arena's schedule, so
// the layout (fragmentation included) that fits in the forecast is the one the device gets.
TEST(Sim, DeviceScheduleDoesNotDependOnTheLinkSpeed) {
  for (const Plan& plan : {Plan::activation_offloading(Decision::host), Plan::hidden_states(),
                           Plan::activation_offloading(Decision::disk)}) {
    for (size_t bound : {size_t(1), size_t(8192), size_t(512) << 20}) {
      const std::string what = fmt::format("{} held {}", plan.preset, bound);
      ForecastRequest fast = tiny_request(plan);
      fast.mirror = SimMirror::cuda;
      fast.tiers.max_inflight_bytes = bound;
      ForecastRequest slow = fast;
      slow.profile.h2d_gbps /= 1000;
      slow.profile.d2h_gbps /= 1000;
      const Forecast f = forecast(fast), s = forecast(slow);
      ASSERT_TRUE(f.fits && s.fits) << what;
      EXPECT_GT(s.copy_busy_s, f.copy_busy_s) << what << ": the slow link must cost time";
      EXPECT_EQ(f.peak_bytes, s.peak_bytes) << what;
      EXPECT_EQ(f.high_water_bytes, s.high_water_bytes) << what;
      expect_same_schedule(s.events, f.events, what);
    }
  }
}

TEST(Sim, HostTierOverlapsOnTheCopyStream) {
  Forecast keep = forecast(tiny_cuda_request(Plan::keep_everything()));
  Forecast off = forecast(tiny_cuda_request(Plan::activation_offloading(Decision::host)));
  Forecast legacy = forecast(tiny_cuda_request(Plan::activation_offloading(Decision::host, true)));
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
  ForecastRequest pr = tiny_cuda_request(Plan::keep_everything());
  pr.mode = TrainMode::frozen;
  pr.plan.layer_weights = Decision::page;
  Forecast paged = forecast(pr);
  ASSERT_TRUE(paged.fits) << paged.oom;
  EXPECT_GT(paged.paged_bytes_uploaded, 0u);
  bool has_slots = false;
  for (auto& it : paged.breakdown) has_slots = has_slots || it.name == "weights (paged layer slots)";
  EXPECT_TRUE(has_slots);
}

TEST(Sim, LayerOffloadingOfAFullFinetuneNeedsZeroStage0) {
  ForecastRequest full = tiny_request(Plan::keep_everything());
  full.plan.layer_weights =
      Decision::page;  // trainable weights paged: forecast (paging_ft_test.cpp checks it against cpu)
  const Forecast f = forecast(full);
  EXPECT_TRUE(f.fits) << f.oom;
  EXPECT_GT(f.paged_host_bytes, 0u);
  full.zero_stage = 1;
  full.gpus = 2;
  EXPECT_THROW(forecast(full), UnsupportedError);
}

// What each backend runs, as the record-time dispatch check reports it: the sim says what the
// backend it mirrors says (cuda: bf16 ops, the optimizer on f32 or bf16 gradients; split masters), the
// cpu backend f32 (its optimizer also on bf16 gradients).
TEST(Sim, DispatchMirrorsTheBackend) {
  SimOptions so;
  so.profile = find_profile("h200");
  auto cuda = make_sim_backend(so);
  EXPECT_EQ(support_summary(*cuda),
            "embedding bf16, rmsnorm bf16, linear bf16, rope bf16, attention bf16, swiglu bf16, add bf16, "
            "bias bf16, lm_head_ce bf16, lm_head_logits bf16, adamw f32/bf16, grad_norm f32/bf16, block_copy bf16, "
            "fp8_cast bf16, linear_fp8 bf16");
  EXPECT_EQ(cuda->master_dtype(), DType::i16);
  so.mirror = SimMirror::cpu;
  auto cpu_mirror = make_sim_backend(so);
  auto cpu = make_cpu_backend(size_t(1) << 20);
  EXPECT_EQ(support_summary(*cpu_mirror), support_summary(*cpu));
  // f32 compute; bf16 only where the optimizer reads bf16 gradients (gradients: bf16).
  EXPECT_EQ(support_summary(*cpu),
            "embedding f32, rmsnorm f32, linear f32, rope f32, attention f32, swiglu f32, add f32, "
            "bias f32, lm_head_ce f32, lm_head_logits f32, adamw f32/bf16, grad_norm f32/bf16, block_copy f32, "
            "fp8_cast f32, linear_fp8 f32");
  EXPECT_EQ(cpu_mirror->master_dtype(), DType::f32);
  EXPECT_EQ(cpu->master_dtype(), DType::f32);
}

// The disk queue: serial, starting no earlier than the host issues a request; done once the clock
// passed its end; a wait moves the clock there. Requests are checked and fail as UringFile's do.
TEST(Sim, DiskFileIsASerialQueueOnTheClock) {
  SimOptions so;
  so.profile = find_profile("h100_80gb");
  so.profile.disk_write_gbps = 2.0;
  so.profile.disk_read_gbps = 4.0;
  auto be = make_sim_backend(so);
  const size_t MiB = size_t(1) << 20;
  auto f = be->open_disk_file("/nonexistent/strata-sim", 64 * MiB);
  EXPECT_FALSE(std::filesystem::exists("/nonexistent/strata-sim")) << "the sim creates no file";
  const double t0 = be->now_s(), w = 8.0 * MiB / 2e9, r = 8.0 * MiB / 4e9;
  DiskFile::Ticket a = f->write_async(0, nullptr, 8 * MiB);
  DiskFile::Ticket b = f->read_async(8 * MiB, nullptr, 8 * MiB);
  EXPECT_FALSE(f->done(a));
  f->wait(b);  // behind a on the one queue
  EXPECT_NEAR(be->now_s() - t0, w + r, 1e-12);
  EXPECT_TRUE(f->done(a));
  EXPECT_NEAR(be->times().disk_wait_s, w + r, 1e-12);
  EXPECT_NEAR(be->times().disk_busy_s, w + r, 1e-12);
  EXPECT_EQ(be->times().disk_write_bytes, 8 * MiB);
  EXPECT_EQ(be->times().disk_read_bytes, 8 * MiB);
  // The queue is idle now: a new request starts at the clock, not at the end of the last one.
  be->synchronize();
  const double t1 = be->now_s();
  f->wait(f->write_async(16 * MiB, nullptr, 4 * MiB));
  EXPECT_NEAR(be->now_s() - t1, 4.0 * MiB / 2e9, 1e-12);

  EXPECT_THROW(f->write_async(100, nullptr, 4096), IoError);         // misaligned
  EXPECT_THROW(f->read_async(60 * MiB, nullptr, 8 * MiB), IoError);  // past the capacity
  f->inject_write_failure(2, EIO);  // the second 1 MiB request from now: inside the next ticket
  DiskFile::Ticket bad = f->write_async(0, nullptr, 2 * MiB);
  try {
    f->wait(bad);
    FAIL() << "an injected write failure must surface";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/strata-sim"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("write at offset 0 failed"), std::string::npos) << e.what();
  }
  // Reads count their own requests: a write in between does not use up the read's fault.
  f->inject_read_failure(1, EIO);
  f->wait(f->write_async(0, nullptr, 1 * MiB));
  DiskFile::Ticket bad_read = f->read_async(4 * MiB, nullptr, 1 * MiB);
  try {
    f->wait(bad_read);
    FAIL() << "an injected read failure must surface";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("read at offset 4194304 failed"), std::string::npos) << e.what();
  }
}

TEST(Sim, DiskPlanNeedsTheProfilesDiskBandwidth) {
  ForecastRequest r = tiny_request(Plan::activation_offloading(Decision::disk));
  for (const char* field : {"disk_write_gbps", "disk_read_gbps"}) {
    ForecastRequest q = r;
    (std::string(field) == "disk_write_gbps" ? q.profile.disk_write_gbps : q.profile.disk_read_gbps) = 0;
    try {
      forecast(q);
      FAIL() << field << ": no error";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.field, field);
      EXPECT_EQ(e.file, q.profile.name);
      EXPECT_NE(what.find(q.profile.name), std::string::npos) << what;
      EXPECT_NE(what.find(field), std::string::npos) << what;
      EXPECT_NE(what.find("strata-calibrate --disk DIR"), std::string::npos) << what;
    }
  }
  // A profile without the fields parses (not measured) and still forecasts plans that use no disk.
  DeviceProfile p = profile_from_json(R"({"name": "old", "memory_bytes": 1000000000, "matmul_tflops": 100,
      "attention_tflops": 100, "hbm_gbps": 1000, "h2d_gbps": 20, "d2h_gbps": 20})",
                                      "old.json");
  EXPECT_EQ(p.disk_write_gbps, 0);
  EXPECT_EQ(p.disk_read_gbps, 0);
  ForecastRequest host = tiny_request(Plan::activation_offloading(Decision::host));
  host.profile = p;
  EXPECT_TRUE(forecast(host).fits);
  r.profile = p;
  EXPECT_THROW(forecast(r), ConfigError);
  EXPECT_THROW(profile_from_json(R"({"name": "x", "memory_bytes": 1, "matmul_tflops": 1, "attention_tflops": 1,
      "hbm_gbps": 1, "h2d_gbps": 1, "d2h_gbps": 1, "disk_read_gbps": -1})",
                                 "x.json"),
               ConfigError);
}

// Lower disk bandwidth, longer step once the drive cannot keep up: reads run while compute goes on, so a fast
// drive hides behind compute and a slow one is on the critical path; memory does not depend on time.
TEST(Sim, DiskBandwidthDrivesStepTime) {
  ForecastRequest r = tiny_cuda_request(Plan::activation_offloading(Decision::disk));
  ForecastRequest host_r = r;
  host_r.plan = Plan::activation_offloading(Decision::host);
  const Forecast host = forecast(host_r);
  auto at = [&](double write_gbps, double read_gbps) {
    ForecastRequest q = r;
    q.profile.disk_write_gbps = write_gbps;
    q.profile.disk_read_gbps = read_gbps;
    Forecast f = forecast(q);
    EXPECT_TRUE(f.fits) << f.oom;
    EXPECT_GT(f.disk_written_bytes, 0u);
    EXPECT_NEAR(f.disk_busy_s, f.disk_written_bytes / (write_gbps * 1e9) + f.disk_read_bytes / (read_gbps * 1e9),
                1e-12 * f.disk_busy_s);
    EXPECT_GE(f.step_s, f.disk_busy_s) << "every request starts and ends inside the step";
    EXPECT_GE(f.step_s, host.step_s) << "the disk tier is the host tier plus the disk";
    return f;
  };
  const Forecast shipped = at(r.profile.disk_write_gbps, r.profile.disk_read_gbps);
  double last = 0;
  for (double gbps : {8.0, 2.0, 0.5, 0.1, 0.02}) {
    Forecast f = at(gbps, gbps);
    EXPECT_GE(f.step_s, last) << gbps << " GB/s";
    EXPECT_EQ(f.peak_bytes, shipped.peak_bytes) << gbps << " GB/s";
    EXPECT_EQ(f.peak_disk_bytes, shipped.peak_disk_bytes) << gbps << " GB/s";
    EXPECT_EQ(f.peak_host_bytes, shipped.peak_host_bytes) << gbps << " GB/s";
    last = f.step_s;
  }
  const Forecast slow = at(0.02, 0.02);
  EXPECT_GT(slow.step_s, host.step_s) << "a slow drive is on the critical path";
  EXPECT_GT(slow.disk_wait_s, 0);
  EXPECT_TRUE(std::ranges::any_of(slow.time_by_op, [](auto& e) { return e.first == "waiting on the disk tier"; }));
  const Forecast fast = at(8, 8);
  EXPECT_GT(at(0.02, 8).step_s, fast.step_s) << "write";
  EXPECT_GT(at(8, 0.02).step_s, fast.step_s) << "read";
  // The reads overlap compute: backward waits less than the reads take.
  EXPECT_LT(shipped.disk_wait_s, double(shipped.disk_read_bytes) / (r.profile.disk_read_gbps * 1e9));
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
  ForecastRequest r = tiny_cuda_request(Plan::keep_everything());
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
  // The backward overwrites q, k and v's gradients (nothing else writes them): no dq/dk/dv scratch.
  const size_t attn_bwd = attention_workspace_bytes(r.batch, r.seq, Hq, Hkv, D, true, wp, false);
  ASSERT_GT(attn_fwd, 0u);
  ASSERT_GT(attn_bwd, attn_fwd);
  ASSERT_LT(attn_bwd, attention_workspace_bytes(r.batch, r.seq, Hq, Hkv, D, true, wp, true));
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
  // The LM head's training variant: its forward holds both chunk buffers; backward needs neither.
  EXPECT_EQ(allocs["loss.logits_chunk"], 1);
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
  // Every shipped profile says how fast its disk is and where that number comes from.
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    DeviceProfile p = load_profile(e.path().string());
    EXPECT_GT(p.disk_write_gbps, 0) << e.path();
    EXPECT_GT(p.disk_read_gbps, 0) << e.path();
    // Either measured by strata-calibrate --disk, or copied from a recorded benchmark.
    EXPECT_TRUE(p.disk_source.find("strata-calibrate --disk") != std::string::npos ||
                p.disk_source.find("docs/BENCHMARKS.md") != std::string::npos)
        << e.path() << ": " << p.disk_source;
  }
}

// strata-calibrate's attention fit recovers the efficiency curve it is given, and the cost model
// then charges each shape what was measured.
TEST(CostModel, AttentionFitRecoversLengthAndHeadDimEfficiency) {
  DeviceProfile truth = find_profile("h200");
  truth.attention_tflops = 700, truth.attention_bwd_tflops = 600;
  truth.attention_half_tokens = 3000, truth.attention_half_dim = 40;
  const CostModel model(truth);
  std::vector<AttentionSample> samples;
  for (double T : {2048.0, 8192.0, 32768.0})
    for (double D : {64.0, 128.0})
      samples.push_back(
          {T, D, 4.0 * 32 * T * T * D / 2, model.attention(1, T, 32, D, false), model.attention(1, T, 32, D, true)});
  const AttentionFit f = fit_attention(samples);
  EXPECT_GT(f.rms_log_error_flat, 0.05);  // one rate for every shape misses by far
  EXPECT_LT(f.rms_log_error, 0.01);
  DeviceProfile fitted = truth;
  fitted.attention_tflops = f.fwd_tflops, fitted.attention_bwd_tflops = f.bwd_tflops;
  fitted.attention_half_tokens = f.half_tokens, fitted.attention_half_dim = f.half_dim;
  const CostModel back(fitted);
  for (auto& s : samples) {
    EXPECT_NEAR(back.attention(1, s.T, 32, s.D, false) / s.t_fwd, 1.0, 0.02) << s.T << " " << s.D;
    EXPECT_NEAR(back.attention(1, s.T, 32, s.D, true) / s.t_bwd, 1.0, 0.02) << s.T << " " << s.D;
  }
  // Shapes that all run at one rate: no efficiency terms.
  for (auto& s : samples) s.t_fwd = s.F / 500e12, s.t_bwd = 2.5 * s.F / 400e12;
  const AttentionFit flat = fit_attention(samples);
  EXPECT_EQ(flat.half_tokens, 0);
  EXPECT_EQ(flat.half_dim, 0);
  EXPECT_NEAR(flat.fwd_tflops, 500, 1e-6);
  EXPECT_NEAR(flat.bwd_tflops, 400, 1e-6);
}

// Measured long points (strata-calibrate --long-attention) price attention past the fit's lengths: a point's own
// length at its measured rate, lengths between interpolated in log T from the fit's rate at 32768, past the last
// point held at it, other head dims scaled by the fit's D efficiency; up to 32768 nothing changes. The points
// round-trip through the profile's JSON, and bad ones are refused naming the field.
TEST(CostModel, LongAttentionPointsPriceLengthsPastTheFit) {
  DeviceProfile fit = find_profile("h200");
  fit.attention_tflops = 600, fit.attention_bwd_tflops = 500;
  fit.attention_half_tokens = 2000, fit.attention_half_dim = 40;
  DeviceProfile longp = fit;
  longp.attention_long = {{131072, 400, 350}, {524288, 380, 300}};
  const CostModel a(fit), b(longp);
  const auto rate = [](const CostModel& m, double t, double d, bool bwd) {
    return (bwd ? 2.5 : 1.0) * 4.0 * 32 * t * t * d / 2 / m.attention(1, t, 32, d, bwd) / 1e12;
  };
  for (double t : {4096.0, 32768.0})
    for (bool bwd : {false, true}) EXPECT_DOUBLE_EQ(a.attention(1, t, 32, 128, bwd), b.attention(1, t, 32, 128, bwd));
  EXPECT_NEAR(rate(b, 131072, 128, false), 400, 1e-9);
  EXPECT_NEAR(rate(b, 524288, 128, true), 300, 1e-9);
  EXPECT_NEAR(rate(b, 1048576, 128, false), 380, 1e-9);
  // 262144 is halfway in log T between the points: the geometric mean of their rates.
  EXPECT_NEAR(rate(b, 262144, 128, false), std::sqrt(400.0 * 380.0), 1e-9);
  // 65536 is halfway between 32768 (the fit's rate) and the first point.
  const double fit_at_32k = 600 * 32768.0 / (32768 + 2000) * 128.0 / (128 + 40);
  EXPECT_NEAR(rate(b, 65536, 128, false), std::sqrt(fit_at_32k * 400.0), 1e-9);
  // D = 64 scales by the fit's D efficiency against D = 128.
  EXPECT_NEAR(rate(b, 131072, 64, false) / rate(b, 131072, 128, false), (64.0 / 104) / (128.0 / 168), 1e-12);
  // Packed rows at a long mean length take the same rate (on the cuDNN path: no flash rate).
  longp.attention_flash_tflops = 0;
  const CostModel c(longp);
  const double t = 524288, pairs = t * t / 2;
  EXPECT_NEAR(c.attention_pairs(t, pairs, 32, 128, true), c.attention(1, t, 32, 128, true), 1e-9);

  const DeviceProfile back = profile_from_json(profile_to_json(longp), "round-trip.json");
  ASSERT_EQ(back.attention_long.size(), 2u);
  EXPECT_EQ(back.attention_long[1].tokens, 524288);
  EXPECT_EQ(back.attention_long[1].bwd_tflops, 300);
  EXPECT_TRUE(profile_from_json(profile_to_json(fit), "no-points.json").attention_long.empty());
  const std::string head = R"({"name": "x", "memory_bytes": 1, "matmul_tflops": 1, "attention_tflops": 1,
      "hbm_gbps": 1, "h2d_gbps": 1, "d2h_gbps": 1, "attention_long": )";
  for (const char* bad : {R"({"tokens": 65536})", R"([{"tokens": 16384, "fwd_tflops": 1, "bwd_tflops": 1}])",
                          R"([{"tokens": 65536, "fwd_tflops": 1, "bwd_tflops": 1},
                              {"tokens": 65536, "fwd_tflops": 1, "bwd_tflops": 1}])",
                          R"([{"tokens": 65536, "fwd_tflops": 0, "bwd_tflops": 1}])",
                          R"([{"tokens": 65536, "fwd_tflops": "fast", "bwd_tflops": 1}])", R"([7])"}) {
    try {
      profile_from_json(head + bad + "}", "bad.json");
      ADD_FAILURE() << bad << ": no error";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field, "attention_long") << bad;
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    }
  }
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

}  // namespace

// Copy lanes (engine/backend.h CopyLane): on the cuda mirror, copies on one lane queue behind each
// other, copies on the two lanes run at once (the link is full duplex); a ticket waits for its own
// lane only.
TEST(Sim, CopyLanesOverlapAndEachLaneKeepsItsOrder) {
  SimOptions so;
  so.profile = find_profile("h200");
  so.profile.copy_both_gbps = 0;  // a fully duplex link (not measured): each direction at its own rate
  auto be = make_sim_backend(so);
  Buffer a(be->arena(), DType::u8, Shape{int64_t(1) << 30}, "test"),
      b(be->arena(), DType::u8, Shape{int64_t(1) << 30}, "test");
  const double one = be->cost().h2d(double(int64_t(1) << 30));
  ASSERT_GT(one, 0.0);
  auto elapsed = [&](CopyLane second) {
    const double t0 = be->now_s();
    const CopyTicket up = be->copy_to_device_async(a.view(), nullptr, CopyLane::main);
    const CopyTicket down = be->copy_to_host_async(nullptr, b.view(), second);
    be->copy_wait_host(up);
    const double after_up = be->now_s() - t0;
    be->copy_wait_host(down);
    return std::pair{after_up, be->now_s() - t0};
  };
  const auto [same_up, same] = elapsed(CopyLane::main);
  EXPECT_NEAR(same_up, one, 1e-12);
  EXPECT_NEAR(same, one + be->cost().d2h(double(int64_t(1) << 30)), 1e-9);  // in issue order, one after the other
  const auto [two_up, two] = elapsed(CopyLane::second);
  EXPECT_NEAR(two_up, one, 1e-12);
  EXPECT_NEAR(two, std::max(one, be->cost().d2h(double(int64_t(1) << 30))), 1e-9);  // concurrent
}

// A link short of full duplex (copy_both_gbps below h2d + d2h): chunks streamed both ways at once, as the
// streamed optimizer runs them (uploads on the main lane, downloads on the second), move at the measured
// total; both on one lane are unchanged; a share of one half serialises them, as do two lanes one way.
TEST(Sim, CopiesBothWaysShareTheLinkAtTheMeasuredTotal) {
  constexpr int64_t kChunk = int64_t(16) << 20;
  constexpr int kChunks = 64;
  auto streamed = [&](double both_gbps, bool two_lanes) {
    SimOptions so;
    so.profile = find_profile("h100_80gb");
    so.profile.h2d_gbps = 45;
    so.profile.d2h_gbps = 45;
    so.profile.copy_both_gbps = both_gbps;
    auto be = make_sim_backend(so);
    Buffer up(be->arena(), DType::u8, Shape{kChunk}, "test"), down(be->arena(), DType::u8, Shape{kChunk}, "test");
    const double t0 = be->now_s();
    for (int i = 0; i < kChunks; ++i) {
      be->copy_to_device_async(up.view(), nullptr, CopyLane::main);
      be->copy_to_host_async(nullptr, down.view(), two_lanes ? CopyLane::second : CopyLane::main);
    }
    be->synchronize();
    return be->now_s() - t0;
  };
  const double bytes = 2.0 * double(kChunk) * kChunks;
  const double one_way = double(kChunk) * kChunks / 45e9, chunk = double(kChunk) / 45e9;
  // Not measured (0) or at least the sum: each direction at its own rate, concurrently.
  EXPECT_NEAR(streamed(0, true), one_way, 1e-6);
  EXPECT_NEAR(streamed(90, true), one_way, 1e-6);
  EXPECT_NEAR(streamed(120, true), one_way, 1e-6);
  // 72 GB/s for both (0.8 of the sum): the stream takes bytes / 72 GB/s, within one chunk's time.
  const double shared = streamed(72, true);
  EXPECT_NEAR(shared, bytes / 72e9, chunk) << "the measured duplex total";
  EXPECT_GT(shared, one_way * 1.2);
  // One lane: one copy after another at each direction's own rate, the duplex share not involved.
  EXPECT_NEAR(streamed(72, false), 2 * one_way, 1e-6);
  // Both lanes one way (downloads on the second lane beside the main lane's): one direction's rate in all.
  {
    SimOptions so;
    so.profile = find_profile("h100_80gb");
    so.profile.h2d_gbps = so.profile.d2h_gbps = 45;
    auto be = make_sim_backend(so);
    Buffer x(be->arena(), DType::u8, Shape{kChunk}, "test"), y(be->arena(), DType::u8, Shape{kChunk}, "test");
    const double t0 = be->now_s();
    for (int i = 0; i < kChunks; ++i) {
      be->copy_to_host_async(nullptr, x.view(), CopyLane::main);
      be->copy_to_host_async(nullptr, y.view(), CopyLane::second);
    }
    be->synchronize();
    EXPECT_NEAR(be->now_s() - t0, 2 * one_way, chunk);
  }
  // A share of one half (45 of 90): no faster than one lane.
  EXPECT_NEAR(streamed(45, true), 2 * one_way, chunk);
}

// Backend::cast (the bf16 gradient reduce's narrowing): round to nearest even on cpu, the same bytes
// as engine/dtype.h's f32_to_bf16, exact back to f32; the sim charges its memory traffic and moves
// nothing; wrong dtypes, sizes or aliasing are errors naming both sides.
TEST(BackendCast, RoundsToNearestEvenAndChecksItsArguments) {
  auto be = make_cpu_backend(size_t(1) << 20);
  const std::vector<float> src = {1.0f, 1.00390625f, 1.01171875f, -3.14159f, 65504.0f, 1e-30f, 0.0f};
  Buffer f(be->arena(), DType::f32, Shape{int64_t(src.size())}, "f");
  Buffer h(be->arena(), DType::bf16, Shape{int64_t(src.size())}, "h");
  Buffer back(be->arena(), DType::f32, Shape{int64_t(src.size())}, "back");
  be->upload_f32(f.view(), src.data());
  be->cast(h.view(), f.view());
  be->cast(back.view(), h.view());
  std::vector<float> got(src.size());
  be->download_f32(got.data(), back.view());
  const auto* bits = static_cast<const uint16_t*>(h.view().data);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(bits[i], f32_to_bf16(src[i])) << i;
    EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(src[i]))) << i;
  }
  EXPECT_EQ(got[1], 1.0f);                            // halfway: to even
  EXPECT_EQ(got[2], 1.015625f);                       // halfway: to even (up)
  EXPECT_THROW(be->cast(f.view(), f.view()), Error);  // same dtype, aliasing
  Buffer small(be->arena(), DType::bf16, Shape{3}, "small");
  EXPECT_THROW(be->cast(small.view(), f.view()), Error);
  SimOptions o;
  o.profile = find_profile("h100_80gb");
  auto sim = make_sim_backend(o);
  Tensor a(nullptr, DType::f32, Shape{1 << 20}), b(reinterpret_cast<void*>(64), DType::bf16, Shape{1 << 20});
  const double t0 = sim->now_s();
  sim->cast(b, a);
  sim->synchronize();
  EXPECT_GT(sim->now_s(), t0);
}
