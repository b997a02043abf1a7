// The sim backend's cost model: a device profile (throughputs, bandwidths, launch floor, library
// workspace sizes, the disk tier's bandwidth) and the time each kind of kernel or transfer takes on
// it. Profiles are JSON files (profiles/*.json) written by hand from datasheets and measurements, or
// by strata-calibrate.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct DeviceProfile {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string match;         // a substring of the driver's device name this profile is for ("H100")
  std::string source;        // provenance: "datasheet/anchors, not calibrated" or "strata-calibrate <date>"
  size_t memory_bytes = 0;   // what the driver reports as total
  size_t context_bytes = 0;  // CUDA context + library handles, outside the arena

  // Dense bf16 GEMM: time = 2·M·N·K / (matmul_tflops · e(M)·e(N)·e(K)), e(d) = d / (d + matmul_half_dim),
  // so small dimensions run below the large-shape asymptote.
  double matmul_tflops = 0;
  double matmul_half_dim = 0;
  // FP8 GEMMs (fp8: true; E4M3/E5M2 operands, fp32 accumulation): the same model at this asymptote. 0: not measured,
  // taken as kFp8OverBf16 x matmul_tflops (Hopper's dense FP8 peak is twice its bf16 peak; cuBLASLt's large FP8
  // GEMMs reach about 1.8x its bf16 ones). strata-calibrate measures it.
  double matmul_fp8_tflops = 0;
  static constexpr double kFp8OverBf16 = 1.8;
  // The FP8 casts (amax passes and code writes, kernels/fp8_cast.cu): bytes read + written / this (0: hbm_gbps).
  // Their 64 x 64 tiles write bytes through shared memory, below the elementwise kernels' rate.
  double fp8_cast_gbps = 0;
  // A GEMM with a dimension that is not a multiple of 8 (a bf16 row not 16-byte aligned: an LM head
  // over a 50257- or 128257-token vocabulary) runs at this share of the rate: cuBLASLt cannot use its
  // aligned (TMA) kernels. Measured with strata-bench on a Llama-3.2-1B shape at 4096 tokens on an
  // H200, 2026-11-26: the step took 16.7 ms longer with a 50257-token vocabulary than padded to
  // 50304, where the LM head's GEMMs take about 4.5 ms: 4.5 / (4.5 + 16.7) = 0.21.
  double matmul_unaligned_factor = 0.21;
  // Causal fused attention, counting only the unmasked half: forward 4·B·H·T²·D/2 FLOPs,
  // backward 2.5x that at attention_bwd_tflops (0 = attention_tflops).
  double attention_tflops = 0;
  double attention_bwd_tflops = 0;
  // Packed rows (sample packing) take strata's own flash kernel on cuda (fp32 math on CUDA cores),
  // not cuDNN's: its rate over the attended pairs, forward and backward (2.5x the forward's FLOPs).
  // Measured: strata-bench --pack 8 against one sequence a row, 1B at 8192 tokens on an H200,
  // 2026-11-26 (0.414 s against 0.152 s a step). 0 = price packed pairs at attention_tflops.
  double attention_flash_tflops = 6.5;
  // Attention efficiency by length and head dim: both rates scale by T / (T + attention_half_tokens)
  // and D / (D + attention_half_dim), so the rates are asymptotes (0, 0 = no scaling: every shape
  // gets the rates). strata-calibrate fits them on T 2048-32768 and D 64 and 128.
  double attention_half_tokens = 0, attention_half_dim = 0;
  // Attention past the fit's lengths (strata-calibrate --long-attention T): the rates measured at B = 1, 32/8 heads,
  // D = 128, for T = 65536, 131072, ... up to T, each over back-to-back calls of seconds, where the GPU runs at its
  // sustained clock. Past kAttentionFitMaxT a length's rate is interpolated in log T between the fit's rate there
  // and these points (held at the last one beyond it); other head dims scale by the fit's D efficiency against
  // D = 128. Empty: the fit's curve at every length.
  struct AttentionRate {
    double tokens = 0, fwd_tflops = 0, bwd_tflops = 0;
  };
  std::vector<AttentionRate> attention_long;
  static constexpr double kAttentionFitMaxT = 32768;  // the fit's longest length (strata-calibrate)
  static constexpr double kAttentionLongD = 128;      // the head dim of the long points
  double hbm_gbps = 0;                                // elementwise kernels: bytes read + written / this
  double h2d_gbps = 0, d2h_gbps = 0;
  // Both directions at once: a 1 GiB upload and a 1 GiB download issued together on the engine's
  // two copy lanes (engine/backend.h CopyLane), total bytes / time (0 = not measured). Below
  // h2d_gbps + d2h_gbps the link is not fully duplex: the sim then runs a copy that overlaps the
  // other lane's copies of the other direction at duplex_share() of its rate (CostModel).
  double copy_both_gbps = 0;
  // AdamW on 8-bit moments (optimizer_state: 8bit) is bound by its arithmetic, not its bytes: at
  // most this many billion elements a second (0 = bytes only). Fitted on an H100 from the 1B and 3B
  // steps (docs/BENCHMARKS.md); strata-calibrate measures it.
  double adamw_q8_gelems = 0;
  double launch_overhead_us = 0;  // no kernel is shorter than this

  // Collectives between ranks (engine/comm_sim.h): NCCL's bus bandwidth as nccl-tests defines it (a ring
  // all_reduce moves 2(N-1)/N of the buffer through each rank at this rate) and a fixed latency per
  // collective. Missing from a JSON file: these defaults, an all-reduce of 1 GiB through NCCL on H100s
  // (329 GB/s bus bandwidth on 2 GPUs, 355 on 4, 361 on 8, measured through PyTorch on this project's
  // hosts, 2026-11-13) and an assumed latency; strata-comm-bench --gpus N measures both.
  double nccl_busbw_gbps = 330;
  double nccl_latency_us = 20;
  // The share of a collective's time that compute running beside it hides. The rest slows that
  // compute: NCCL's kernels take SMs and memory bandwidth, and a GPU at its power cap slows. Measured
  // with tools/bench/overlap_probe.py (an fp32 / bf16 all-reduce beside a stream of bf16 GEMMs,
  // through PyTorch) on 2 and 4 H200s, 2026-11-26: 0.53 / 0.21 on 2, 0.61 / 0.36 on 4; the default is
  // their mean. 1 = a collective costs compute nothing.
  double nccl_compute_overlap = 0.43;

  // The disk tier (activation_offloading: disk): sequential O_DIRECT bandwidth of the offload directory's disk,
  // as io::measure_direct_bandwidth measures it (strata-calibrate --disk DIR). 0 = not measured: forecasting a plan
  // with disk decisions is then a ConfigError. `disk_source` says where the numbers come from.
  double disk_write_gbps = 0, disk_read_gbps = 0;
  std::string disk_source;

  // The first step's setup (Forecast::setup_s): pinned host memory (the state's and the weight pager's reservations,
  // made at load, and the slot store's, made inside the first step) allocated at pinned_alloc_gbps, and the
  // libraries' first-call work (cuBLASLt's heuristics, cuDNN's plan builds) as first_step_tuning_s, plus the
  // kernels' first-call tuning, which the sim forecasts per problem: every GEMM problem's candidates run
  // kGemmTuneCandidates x (1 + kGemmTuneReps) times, every attention shape's (at its stand-in length past
  // kAttentionTuneMaxT) attention_tune_candidates_fwd/_bwd x (1 + kAttentionTuneReps) times (kernels/tune_costs.h).
  // strata-calibrate times a 4 GiB pinned allocation (after a first 1 GiB one) the way the cuda backend makes it
  // (kernels/resources_cuda.h: pages touched by several threads, then registered): 18.6 GB/s on an H200 host, where
  // cudaHostAlloc gave 1.4. The defaults are assumptions: 10 GB/s, and 2 s of tuning.
  double pinned_alloc_gbps = 10.0;
  double first_step_tuning_s = 2.0;
  // Pinning host memory the machine has not touched since it started (a fresh cloud VM's: its pages are backed at
  // first touch), machine-wide, shared by the ranks pinning at once (Forecast::setup_fresh_pinned_s). 0: not
  // measured. strata-calibrate --host-fill measures it on a fresh machine: about 4-6 GB/s on the H200 machines
  // lent here, against 16-27 GB/s for memory touched before.
  double pinned_first_touch_gbps = 0;
  // The eligible cuDNN attention plans a shape has, forward and backward: 2 and 6 at the 8B's heads (32/8 x 128) on
  // an H200 with cuDNN 9.14 (STRATA_ATTN_VERBOSE=1, docs/bench/2026-11-26-h200-attention-tuning.txt).
  int attention_tune_candidates_fwd = 2;
  int attention_tune_candidates_bwd = 6;
  // cuDNN builds an attention shape's plans at its first call: the forward graph and every backward variant, each
  // with every candidate engine config (kernels/attention_cudnn_cuda.cpp). attention_plan_build_s: seconds for each
  // shape a step runs on the cuDNN path; attention_stand_in_build_s: for the stand-in a longer shape then tunes on,
  // which reuses the kernels just compiled (2.5-4.5 s and 0.7-1.3 s for an 8B layer on an H200, cuDNN 9.14).
  // strata-calibrate measures both on the process's first shape (cuda::Attention::plan_build_seconds). Both assume the
  // driver's kernel cache holds cuDNN's compiled kernels, as after any earlier run on the machine; the first run on a
  // fresh machine compiles them (docs/PLANNER.md). 0 = not measured: first_step_tuning_s then stands for them.
  double attention_plan_build_s = 0;
  double attention_stand_in_build_s = 0;

  // cuDNN's execution-plan workspace for the attention graphs (kernels/attention_workspace.h):
  // forward a constant; backward a constant plus, for GQA, `gqa_copies` fp32 [B, Hq, T, D]
  // buffers. Only cuDNN knows it at run time; strata-calibrate records it
  // (tests/gpu/sim_gpu_test.cpp checks the model against cuDNN shape by shape).
  size_t attention_plan_ws_fwd_bytes = 0;
  size_t attention_plan_ws_bwd_bytes = 0;
  int attention_plan_ws_bwd_gqa_copies = 0;
  bool attention_dq_accum = true;  // the backward plan variant with the fp32 dQ accumulator

  // The arena budget the cuda backend takes by default (free memory less 2 GiB of headroom).
  size_t default_arena_bytes() const;
};

// JSON (nlohmann) both ways; parse errors are ConfigErrors naming `where` and the field.
std::string profile_to_json(const DeviceProfile& p);
DeviceProfile profile_from_json(const std::string& text, const std::string& where);
DeviceProfile load_profile(const std::string& path);  // IoError / ConfigError naming the file
void save_profile(const DeviceProfile& p, const std::string& path);

// The profiles shipped in profiles/*.json, compiled in so the tools need no data directory
// ("h100_80gb", "h200"). A test checks the files and these agree.
const std::vector<std::pair<std::string, DeviceProfile>>& builtin_profiles();
// A built-in name or a path to a JSON file.
DeviceProfile find_profile(const std::string& name_or_path);

// Seconds per kernel on a profile. Each already includes the launch floor.
class CostModel {
 public:
  explicit CostModel(DeviceProfile p) : p_(std::move(p)) {}
  const DeviceProfile& profile() const { return p_; }

  double floor(double seconds) const;                                 // max(seconds, launch overhead)
  double gemm(double m, double n, double k, double bytes) const;      // max of FLOP time and byte time
  double gemm_fp8(double m, double n, double k, double bytes) const;  // the same at the FP8 rate
  double fp8_cast(double bytes) const;                                // an FP8 cast kernel moving `bytes`
  double attention(double b, double t, double heads, double d, bool backward) const;
  // Packed rows (sample packing): `pairs` (query, key) pairs per head over `tokens` tokens, the
  // sum of L(L+1)/2 over the examples; priced as attention() prices B·T²/2 pairs, its efficiency
  // read at the mean attended length 2·pairs/tokens (T for one sequence a row).
  double attention_pairs(double tokens, double pairs, double heads, double d, bool backward) const;
  double memory(double bytes) const;  // an elementwise kernel moving `bytes`
  double h2d(double bytes) const;
  double d2h(double bytes) const;
  // The share of its own rate a copy gets while the other direction's copies run too:
  // copy_both_gbps / (h2d_gbps + d2h_gbps), at most 1 (1 when copy_both_gbps is 0, not measured).
  double duplex_share() const;
  // One disk-tier request (no launch floor). ConfigError naming the profile and the field when it is not measured.
  double disk_write(double bytes) const;
  double disk_read(double bytes) const;
  void require_disk() const;  // both disk fields measured, else that ConfigError
  // Achieved attention FLOP/s at mean attended length t and head dim d (CostModel::attention's rate): the fit's
  // asymptote times its efficiency up to kAttentionFitMaxT, the long points past it (DeviceProfile::attention_long).
  double attention_rate(double t, double d, bool backward) const;

 private:
  DeviceProfile p_;
};

// strata-calibrate's attention fit. A sample is one measured shape: causal forward FLOPs F (as
// CostModel::attention counts them), the forward time and the backward time (2.5 F of work).
struct AttentionSample {
  double T, D, F, t_fwd, t_bwd;
};
struct AttentionFit {
  double half_tokens = 0, half_dim = 0;   // DeviceProfile::attention_half_tokens / _dim
  double fwd_tflops = 0, bwd_tflops = 0;  // the asymptotes
  double rms_log_error = 0;               // of the fitted model over every sample and direction
  double rms_log_error_flat = 0;          // of one rate for every shape (both half points 0)
};
// Grid search over the half points (T: 0 or 64-65536 in 10% steps; D: 0-256 in steps of 2), then
// a finer one around the best (0.5% and 0.1 steps), for the least squared log error; for each, the asymptotes that make
// the model's total time equal the measured total in each direction.
AttentionFit fit_attention(const std::vector<AttentionSample>& samples);

}  // namespace strata
