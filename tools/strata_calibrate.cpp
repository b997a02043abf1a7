// strata-calibrate: measures this GPU through strata's own cuda backend (the ops, arena and copy
// stream the engine uses) and writes a device profile (engine/cost_model.h) for the sim backend.
// Every rate is fitted so that the cost model, counting work the way kernels/backend_sim.cpp does,
// reproduces the measured time: see docs/PLANNER.md, "Calibrating a profile".
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/cost_model.h"
#include "engine/parallel.h"
#include "tools/cli.h"
#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend_cuda.h"
#include "engine/uring_file.h"
#include "kernels/adamw.h"
#include "kernels/attention_cuda.h"
#include "kernels/attention_workspace.h"
#include "kernels/resources_cuda.h"
#include "model/llama/rng.h"
#include "tools/calibrate_host.h"
#endif

using namespace strata;

#ifndef STRATA_HAVE_CUDA
int main() {
  std::fputs("strata-calibrate needs the cuda backend (this build has none)\n", stderr);
  return 2;
}
#else
static const char* kUsage =
    "usage: strata-calibrate [--out FILE] [--quick] [--disk DIR]\n"
    "  measures GEMM, attention, HBM, host-copy and launch rates through the cuda backend and writes\n"
    "  a device profile (default profiles/<name>.calibrated.json); --quick: fewer, shorter repeats\n"
    "  --disk DIR: also the disk tier's O_DIRECT write and read bandwidth in DIR (a directory on the disk\n"
    "  offload_dir will use; 4 GiB written then read, 1 GiB with --quick). Without it the profile's disk\n"
    "  fields stay 0 (not measured) and disk-tier forecasts with it are refused until they are set.\n"
    "  --long-attention T: also attention at 65536, 131072, ... up to T tokens (B = 1, 32/8 heads, D 128; lengths\n"
    "  that do not fit the free memory are skipped), each timed over back-to-back calls at the GPU's sustained\n"
    "  clock: the profile's attention_long points, which price attention past the fit's 32768 tokens\n"
    "  --adamw: also AdamW over state on the host (fp32 recipe): the update streamed through the GPU, as\n"
    "  the optimizer runs it, against a multithreaded host AdamW (1 thread up to every core) that only\n"
    "  uploads the new bf16 weights; prints both (not a profile field)\n"
    "  --host-fill: only this, then exit: pinned host memory reserved 8 GiB at a time, the way the engine pins it,\n"
    "  each held, until the host has 16 GiB or a tenth of its memory available (/proc/meminfo MemAvailable);\n"
    "  prints each reservation's rate beside what is pinned and available (how pinning slows as the host\n"
    "  fills; several processes at once show how ranks on one host share it), and the first-touch rate: the\n"
    "  reservations slower than half the fastest's (memory a fresh machine had never touched). With --out PROFILE\n"
    "  that rate is written into the profile's pinned_first_touch_gbps (strata-plan then forecasts a fresh\n"
    "  machine's pinning beside the warm one)\n";

namespace {

using calibrate::Clock;
using calibrate::kGiB;
using calibrate::seconds_since;

// A shape's first forward and backward, each waited for: wall seconds, and the part of them that built
// cuDNN plans (cuda::Attention::plan_build_seconds). The rest is the tuning's timed runs and the calls.
struct FirstCall {
  double wall_s = 0, build_s = 0;
};
FirstCall first_call(Backend& be, const std::function<void()>& fwd, const std::function<void()>& bwd) {
  be.synchronize();
  const double built = cuda::Attention::plan_build_seconds();
  const auto t0 = Clock::now();
  fwd();
  bwd();
  be.synchronize();
  return {seconds_since(t0), cuda::Attention::plan_build_seconds() - built};
}

// Seconds per call of `op`: warm up, size a batch to ~target seconds (or `fixed` calls), time
// `repeats` batches between be.synchronize() calls, return the median.
struct Timer {
  Backend& be;
  bool quick;
  double per_call(const std::function<void()>& op, int fixed = 0) {
    for (int i = 0; i < 3; ++i) op();
    be.synchronize();
    int iters = fixed;
    if (!iters) {
      auto t0 = Clock::now();
      op();
      be.synchronize();
      iters = int(std::clamp((quick ? 0.01 : 0.05) / seconds_since(t0), 1.0, 20000.0));
    }
    std::vector<double> s;
    for (int r = 0; r < (quick ? 5 : 9); ++r) {
      be.synchronize();
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) op();
      be.synchronize();
      s.push_back(seconds_since(t0) / iters);
    }
    std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
    return s[s.size() / 2];
  }
};

// Uniform [-scale, scale) values, uploaded 4M elements at a time (converted to t's dtype).
void randomize(Backend& be, const Tensor& t, float scale, uint64_t seed) {
  const int64_t chunk = std::min<int64_t>(t.numel(), int64_t(1) << 22);
  std::vector<float> h(static_cast<size_t>(chunk));
  Rng rng(seed);
  for (float& x : h) x = float((2 * rng.uniform() - 1) * scale);
  auto* base = static_cast<std::byte*>(t.data);
  for (int64_t off = 0; off < t.numel(); off += chunk)
    be.upload_f32(Tensor(base + off * int64_t(dtype_size(t.dtype)), t.dtype, Shape{std::min(chunk, t.numel() - off)}),
                  h.data());
}

// One GEMM as the sim backend charges it: CostModel::gemm(m, n, k, bytes).
struct Mm {
  double m, n, k, bytes;
};
struct GemmMeas {
  std::vector<Mm> mms;  // linear_fwd: one; linear_bwd: dx and dw
  double t;             // measured seconds per call
  bool large;           // N = 8192: fits matmul_tflops; the small-N shapes fit matmul_half_dim
};
// The asymptote that makes the model's total time over the large shapes equal the measured one
// (half = 0: the plain FLOP-weighted achieved rate).
double fit_tflops(const std::vector<GemmMeas>& ms, double half) {
  double work = 0, t = 0;
  auto e = [&](double d) { return half > 0 ? d / (d + half) : 1.0; };
  for (auto& g : ms)
    if (g.large) {
      for (auto& x : g.mms) work += 2 * x.m * x.n * x.k / (e(x.m) * e(x.n) * e(x.k));
      t += g.t;
    }
  return work / t / 1e12;
}
double log_err2(const CostModel& cm, const std::vector<GemmMeas>& ms, bool small_only) {
  double s = 0;
  for (auto& g : ms) {
    double model = 0;
    for (auto& x : g.mms) model += cm.gemm(x.m, x.n, x.k, x.bytes);
    if (!small_only || !g.large) s += std::pow(std::log(model / g.t), 2);
  }
  return s;
}

std::string match_token(const std::string& name) {  // "NVIDIA H100 80GB HBM3" -> "H100"
  std::istringstream in(name);
  for (std::string tok; in >> tok;)
    if (tok != "NVIDIA" && std::any_of(tok.begin(), tok.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
      return tok;
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cli::Args a(argc, argv, {"out", "disk", "long-attention"}, {"help", "quick", "adamw", "host-fill"});
    if (a.has("help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!cuda_device_present()) {
      std::fputs("strata-calibrate: no CUDA GPU found (cudaGetDeviceCount reports none); run it on the GPU host\n",
                 stderr);
      return 1;
    }
    if (a.has("host-fill")) return calibrate::host_fill(a.str("out", ""));
    const bool quick = a.has("quick");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) throw UnsupportedError("cudaGetDeviceProperties failed");
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) throw UnsupportedError("cudaMemGetInfo failed");

    // The built-in profile of this GPU: its attention plan workspace fields are kept (cuDNN's).
    const std::string dev = prop.name;
    std::string key = "h100_80gb";
    DeviceProfile p = builtin_profiles().front().second;
    bool matched = false;
    for (auto& [k, bp] : builtin_profiles())
      if (!matched && dev.find(bp.match) != std::string::npos) key = k, p = bp, matched = true;
    const DeviceProfile base = p;
    p.name = dev;
    p.match = match_token(dev);
    p.memory_bytes = total_b;
    if (!matched) {
      key.clear();
      for (char c : dev) key += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '_';
      std::fprintf(stderr,
                   "strata-calibrate: no built-in profile matches '%s'; keeping %s's attention workspace fields\n",
                   dev.c_str(), builtin_profiles().front().first.c_str());
    }
    const std::string out = a.str("out", "profiles/" + key + ".calibrated.json");

    // The arena: 6 GiB, or with --long-attention what its longest length that fits this GPU takes.
    const size_t cap = free_b > size_t(3) * kGiB ? free_b - 2 * kGiB : free_b / 2;
    const AttnWorkspaceParams ws{p.attention_plan_ws_fwd_bytes, p.attention_plan_ws_bwd_bytes,
                                 p.attention_plan_ws_bwd_gqa_copies, p.attention_dq_accum};
    const int long_hq = 32, long_hkv = 8, long_d = int(DeviceProfile::kAttentionLongD);
    const auto long_need = [&](int64_t T) {  // q, o, dout, dq and k, v, dk, dv (bf16), lse (f32), the workspace;
      const double nq = double(T) * long_hq * long_d, nkv = double(T) * long_hkv * long_d;  // 5% for alignment
      return size_t(1.05 * (2 * (4 * nq + 4 * nkv) + 4.0 * long_hq * double(T) +
                            double(attention_workspace_bytes(1, int(T), long_hq, long_hkv, long_d, true, ws))));
    };
    const int64_t long_max = a.integer("long-attention", 0);
    if (a.has("long-attention") && long_max < 65536)
      throw ConfigError(fmt::format("--long-attention expects the longest length to measure, at least 65536 (the "
                                    "fit covers up to 32768), got {}",
                                    long_max),
                        "command line", "long-attention");
    size_t budget = std::min<size_t>(size_t(6) * kGiB, cap);
    const size_t long_slack = size_t(kGiB) / 2;  // what the earlier measurements leave allocated, and alignment
    for (int64_t T = 65536; T <= long_max && T <= (int64_t(1) << 30); T *= 2)
      if (long_need(T) + long_slack <= cap) budget = std::max(budget, long_need(T) + long_slack);
    auto be = make_cuda_backend(budget);
    Arena& ar = be->arena();
    auto buf = [&](DType dt, Shape sh) { return Buffer(ar, dt, sh, "calibrate"); };
    Timer tm{*be, quick};
    std::printf("strata-calibrate: %s (sm_%d%d, %s), base profile %s%s\n", dev.c_str(), prop.major, prop.minor,
                format_bytes(total_b).c_str(), matched ? key.c_str() : "none", quick ? ", --quick" : "");
    std::printf("  %-40s %11s %14s\n", "measurement", "per call", "rate");
    auto row = [](const std::string& what, double t, double rate, const char* unit) {
      std::printf("  %-40s %8.3f ms %9.1f %s\n", what.c_str(), t * 1e3, rate, unit);
      std::fflush(stdout);
    };

    // Launch floor: 2000 tiny adds queued back to back.
    {
      Buffer x = buf(DType::bf16, {1024}), y = buf(DType::bf16, {1024}), z = buf(DType::bf16, {1024});
      be->fill(x.view(), 1.0f), be->fill(y.view(), 0.5f);
      const double t = tm.per_call([&] { be->add_fwd(z.view(), x.view(), y.view(), 1.0f); }, 2000);
      p.launch_overhead_us = t * 1e6;
      std::printf("  %-40s %8.2f us\n", "launch (add_fwd n=1024, 2000 in a row)", t * 1e6);
    }

    // HBM: add_fwd bf16 [256M] (2+2 B read, 2 B written per element) and adamw_step [128M] on the
    // backend's masters (bytes as the sim counts them: 2·(master + m + v) + g, plus the bf16 high half
    // read and written for a split master: 28 B a weight either way). hbm_gbps = total bytes / total time.
    double hbm_bytes = 0, hbm_t = 0;
    {
      const int64_t n = int64_t(256) << 20;
      Buffer x = buf(DType::bf16, {n}), y = buf(DType::bf16, {n}), z = buf(DType::bf16, {n});
      be->fill(x.view(), 1.25f), be->fill(y.view(), -0.5f);
      const double t = tm.per_call([&] { be->add_fwd(z.view(), x.view(), y.view(), 1.0f); });
      row("add_fwd bf16 [256M]", t, 6.0 * n / t / 1e9, "GB/s");
      hbm_bytes += 6.0 * n, hbm_t += t;
    }
    {
      const int64_t n = int64_t(128) << 20;
      const bool split = be->master_dtype() != DType::f32;
      Buffer w = buf(be->master_dtype(), {n}), m = buf(DType::f32, {n}), v = buf(DType::f32, {n}),
             g = buf(DType::f32, {n}), nsq = buf(DType::f32, {1});
      Buffer hi = split ? buf(be->compute_dtype(), {n}) : Buffer();
      if (split) {
        be->zero(w.view());  // low halves 0: the master is exactly the bf16 weights
        be->fill(hi.view(), 0.1f);
      } else {
        be->fill(w.view(), 0.1f);
      }
      be->fill(m.view(), 0.01f), be->fill(v.view(), 0.01f), be->fill(g.view(), 0.02f);
      be->fill(nsq.view(), 1.0f);
      AdamWParams ap;
      ap.lr = 1e-5f;
      int step = 0;
      const Tensor out = split ? hi.view() : Tensor();
      const double t = tm.per_call([&] {
        be->adamw_step({w.view(), m.view(), v.view(), g.view(), out, Tensor(), Tensor()}, nsq.view(), 1e9f, ap, ++step);
      });
      row(split ? "adamw_step split master [128M]" : "adamw_step fp32 [128M]", t, 28.0 * n / t / 1e9, "GB/s");
      hbm_bytes += 28.0 * n, hbm_t += t;
      // 8-bit moments (optimizer_state: 8bit): elements a second, the rate the sim charges when it
      // is below what the kernel's bytes would allow (DeviceProfile::adamw_q8_gelems).
      Buffer mq = buf(DType::u8, {n}), vq = buf(DType::u8, {n});
      Buffer ms = buf(DType::f32, {int64_t(quant_blocks(size_t(n)))}),
             vs = buf(DType::f32, {int64_t(quant_blocks(size_t(n)))});
      be->zero(mq.view()), be->zero(vq.view()), be->zero(ms.view()), be->zero(vs.view());
      const double tq = tm.per_call([&] {
        be->adamw_step({w.view(), mq.view(), vq.view(), g.view(), out, ms.view(), vs.view()}, nsq.view(), 1e9f, ap,
                       ++step);
      });
      p.adamw_q8_gelems = double(n) / tq / 1e9;
      row("adamw_step 8-bit moments [128M]", tq, p.adamw_q8_gelems, "Gelem/s");
    }
    p.hbm_gbps = hbm_bytes / hbm_t / 1e9;

    // Pinned host copies, 1 GiB each way, on the copy stream the tiers use.
    {
      // The first step's pinned allocations (Forecast::setup_s): 1 GiB, then 4 GiB (the rate: the first pays the
      // process's first pinning); then 4 GiB the other way (kernels/resources_cuda.h, HostPinning), printed beside.
      const Clock::time_point t_alloc = Clock::now();
      auto host = be->reserve_host(size_t(kGiB));
      const double ta = seconds_since(t_alloc);
      row("pinned host allocation 1 GiB (first)", ta, double(kGiB) / ta / 1e9, "GB/s");
      for (const bool other : {false, true}) {  // the backend's way (its rate kept), then the other, printed beside
        const bool reg = (cuda::default_host_pinning() == cuda::HostPinning::touch_register) != other;
        const Clock::time_point t4 = Clock::now();
        cuda::CudaHostMemory m(size_t(4) * kGiB, reg ? cuda::HostPinning::touch_register : cuda::HostPinning::alloc);
        const double tb = seconds_since(t4), gbps = 4.0 * double(kGiB) / tb / 1e9;
        row(fmt::format("pinned host allocation 4 GiB ({}{})", reg ? "registered" : "cudaHostAlloc",
                        other ? ", not used" : ""),
            tb, gbps, "GB/s");
        if (!other) p.pinned_alloc_gbps = gbps;
      }
      if (!host->pinned())
        std::fprintf(stderr, "strata-calibrate: warning: host memory is not pinned (%s)\n", host->note.c_str());
      std::fill_n(reinterpret_cast<unsigned char*>(host->base()), host->bytes(), 0x5A);
      Buffer d = buf(DType::u8, {kGiB});
      be->fill(Tensor(d.view().data, DType::f32, Shape{kGiB / 4}), 3.0f);
      double t = tm.per_call([&] { be->copy_wait_host(be->copy_to_device_async(d.view(), host->base())); });
      row("host -> device 1 GiB", t, double(kGiB) / t / 1e9, "GB/s");
      p.h2d_gbps = double(kGiB) / t / 1e9;
      t = tm.per_call([&] { be->copy_wait_host(be->copy_to_host_async(host->base(), d.view())); });
      row("device -> host 1 GiB", t, double(kGiB) / t / 1e9, "GB/s");
      p.d2h_gbps = double(kGiB) / t / 1e9;
      // Both at once, as the streamed optimizer runs them (model/train/optimizer.h): 1 GiB each way in
      // 256 MiB chunks, uploads on the main copy lane and downloads on the second, issued in turn:
      // what the link gives both directions together (the sim's duplex share, CostModel).
      Buffer d2 = buf(DType::u8, {kGiB});
      auto host2 = be->reserve_host(size_t(kGiB));
      constexpr int64_t kPiece = int64_t(256) << 20;
      t = tm.per_call([&] {
        std::vector<CopyTicket> tickets;
        for (int64_t off = 0; off < kGiB; off += kPiece) {
          Tensor up_dst(static_cast<char*>(d2.view().data) + off, DType::u8, Shape{kPiece});
          Tensor down_src(static_cast<char*>(d.view().data) + off, DType::u8, Shape{kPiece});
          tickets.push_back(be->copy_to_device_async(up_dst, host->base() + off, CopyLane::main));
          tickets.push_back(be->copy_to_host_async(host2->base() + off, down_src, CopyLane::second));
        }
        for (CopyTicket c : tickets) be->copy_wait_host(c);
      });
      row("both at once, 1 GiB each way", t, 2.0 * double(kGiB) / t / 1e9, "GB/s");
      p.copy_both_gbps = 2.0 * double(kGiB) / t / 1e9;
    }

    if (a.has("adamw")) calibrate::compare_adamw(*be, ar, quick);

    // GEMMs: linear_fwd and linear_bwd (dx bf16, dw fp32 accumulate) on Llama shapes at N = 8192
    // tokens, and N = 256 for the small-dimension efficiency curve.
    std::vector<GemmMeas> gm;
    const int64_t shapes[][2] = {{2048, 2048}, {2048, 8192}, {8192, 2048}, {4096, 14336}, {14336, 4096}};
    for (int64_t N : {int64_t(8192), int64_t(256)})
      for (auto [in, o] : shapes) {
        if (N == 256 && in == 2048 && o == 8192) continue;  // the other four suffice for the curve
        Buffer x = buf(DType::bf16, {N, in}), w = buf(DType::bf16, {o, in}), y = buf(DType::bf16, {N, o}),
               dy = buf(DType::bf16, {N, o}), dx = buf(DType::bf16, {N, in}), dw = buf(DType::f32, {o, in});
        randomize(*be, x.view(), 1.0f, 1), randomize(*be, w.view(), 0.05f, 2), randomize(*be, dy.view(), 1e-3f, 3);
        be->zero(dx.view()), be->zero(dw.view());
        const double es = 2, dN = double(N), dI = double(in), dO = double(o);
        GemmMeas f{{{dN, dO, dI, es * (dN * dI + dO * dI + dN * dO)}}, 0, N == 8192};
        f.t = tm.per_call([&] { be->linear_fwd(y.view(), x.view(), w.view()); });
        GemmMeas b{{{dN, dI, dO, es * (dN * dO + dO * dI) + 2 * es * dN * dI},
                    {dO, dI, dN, es * (dN * dO + dN * dI) + 2 * 4 * dO * dI}},
                   0,
                   N == 8192};
        b.t = tm.per_call([&] { be->linear_bwd(dx.view(), dw.view(), dy.view(), x.view(), w.view()); });
        row(fmt::format("linear_fwd N={} {}x{}", N, in, o), f.t, 2 * dN * dI * dO / f.t / 1e12, "TFLOP/s");
        row(fmt::format("linear_bwd N={} {}x{} (dx+dw)", N, in, o), b.t, 4 * dN * dI * dO / b.t / 1e12, "TFLOP/s");
        gm.push_back(f), gm.push_back(b);
      }
    const double achieved = fit_tflops(gm, 0);
    // matmul_half_dim: the h in [0, 2048] whose asymptote (fitted on N = 8192) best predicts every
    // shape (squared log error); kept from the built-in unless interior and the small shapes
    // land within ~25% (rms).
    auto with = [&](double h) {
      DeviceProfile q = p;
      q.matmul_half_dim = h;
      q.matmul_tflops = fit_tflops(gm, h);
      return q;
    };
    double best_h = 0, best_e = 1e300;
    for (double h = 0; h <= 2048; h += 4) {
      const double e = log_err2(CostModel(with(h)), gm, false);
      if (e < best_e) best_e = e, best_h = h;
    }
    const auto n_small = std::count_if(gm.begin(), gm.end(), [](auto& g) { return !g.large; });
    const double small_rms =
        std::sqrt(log_err2(CostModel(with(best_h)), gm, true) / double(std::max<long>(1, n_small)));
    const bool fitted = best_h > 0 && best_h < 2048 && small_rms < 0.25;
    p = with(fitted ? best_h : base.matmul_half_dim);
    std::printf("  GEMM, FLOP-weighted over N=8192: %.1f TFLOP/s achieved; half_dim %s %.0f -> asymptote %.1f\n",
                achieved, fitted ? "fitted" : "kept (fit not robust)", p.matmul_half_dim, p.matmul_tflops);
    if (!fitted) std::printf("    (best h %.0f, small-N rms log error %.2f)\n", best_h, small_rms);

    // FP8 casts (fp8: true): a [8192, 14336] bf16 tensor to its codes in both layouts, the bytes the sim charges
    // (an amax pass, then the cast) over the time: fp8_cast_gbps.
    {
      const int64_t R = 8192, Cc = 14336;
      Buffer x = buf(DType::bf16, {R, Cc}), q = buf(DType::u8, {R, Cc}), qt = buf(DType::u8, {Cc, R}),
             sb = buf(DType::f32, {4});
      randomize(*be, x.view(), 1.0f, 4);
      const double t = tm.per_call([&] { be->fp8_cast(q.view(), qt.view(), sb.view(), x.view(), 0); });
      const double bytes = 2.0 * double(x.view().bytes()) + 2.0 * double(q.view().bytes()) + 16;
      p.fp8_cast_gbps = bytes / t / 1e9;
      row("fp8_cast 8192x14336 (both layouts)", t, p.fp8_cast_gbps, "GB/s");
    }
    // FP8 GEMMs (fp8: true): linear_fp8_fwd (the GEMM alone: both operands' codes are cast beforehand, as the
    // fp8_cast nodes do it) on the N = 8192 shapes: the asymptote at the bf16 fit's half_dim.
    {
      auto e = [&](double d) { return p.matmul_half_dim > 0 ? d / (d + p.matmul_half_dim) : 1.0; };
      double work = 0, t = 0;
      for (auto [in, o] : shapes) {
        const int64_t N = 8192;
        Buffer x = buf(DType::bf16, {N, in}), w = buf(DType::bf16, {o, in}), y = buf(DType::bf16, {N, o}),
               q = buf(DType::u8, {N, in}), sb = buf(DType::f32, {4}), w8 = buf(DType::u8, {o, in}),
               sw = buf(DType::f32, {4});
        randomize(*be, x.view(), 1.0f, 1), randomize(*be, w.view(), 0.05f, 2);
        be->fp8_cast(q.view(), Tensor(), sb.view(), x.view(), 0);
        be->fp8_cast(w8.view(), Tensor(), sw.view(), w.view(), 0);
        const double g = tm.per_call([&] { be->linear_fp8_fwd(y.view(), q.view(), sb.view(), w8.view(), sw.view()); });
        const double dN = double(N), dI = double(in), dO = double(o);
        row(fmt::format("linear_fp8_fwd N={} {}x{} (GEMM)", N, in, o), g, 2 * dN * dI * dO / g / 1e12, "TFLOP/s");
        work += 2 * dN * dI * dO / (e(dN) * e(dI) * e(dO));
        t += g;
      }
      p.matmul_fp8_tflops = work / t / 1e12;
      std::printf("  FP8 GEMM asymptote at half_dim %.0f: %.1f TFLOP/s (%.2fx bf16)\n", p.matmul_half_dim,
                  p.matmul_fp8_tflops, p.matmul_fp8_tflops / p.matmul_tflops);
    }

    // cuDNN's plan builds as a training run meets them (attention_plan_build_s, attention_stand_in_build_s): the
    // process's first attention shape, longer than kAttentionTuneMaxT, so its first call builds its own plans and
    // then its stand-in's (the latest build) to tune on. Before the fit's shapes, one of which is that stand-in.
    {
      const int64_t T = kAttentionTuneMaxT + 4096, Hq = 32, Hkv = 8, D = int64_t(DeviceProfile::kAttentionLongD);
      const Shape sq{1, T, Hq, D}, skv{1, T, Hkv, D};
      Buffer q = buf(DType::bf16, sq), k = buf(DType::bf16, skv), v = buf(DType::bf16, skv), o = buf(DType::bf16, sq),
             lse = buf(DType::f32, {1, Hq, T}), dout = buf(DType::bf16, sq), dq = buf(DType::bf16, sq),
             dk = buf(DType::bf16, skv), dv = buf(DType::bf16, skv);
      randomize(*be, q.view(), 1.0f, 4), randomize(*be, k.view(), 1.0f, 5), randomize(*be, v.view(), 1.0f, 6);
      randomize(*be, dout.view(), 1e-3f, 7);
      be->zero(dq.view()), be->zero(dk.view()), be->zero(dv.view());
      const FirstCall first = first_call(
          *be, [&] { be->attention_fwd(o.view(), lse.view(), q.view(), k.view(), v.view(), AttnSegments{}); },
          [&] {
            be->attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(), v.view(), o.view(),
                              lse.view());
          });
      const double stand_in_first = cuda::Attention::last_plan_build_seconds();
      std::printf("  %-40s %8.3f s  plans built: its own %.3f s, its stand-in's (T=%d) %.3f s\n",
                  fmt::format("attention first call T={} 32/8 D={}", T, D).c_str(), first.wall_s,
                  first.build_s - stand_in_first, kAttentionTuneMaxT, stand_in_first);
      // On a machine that never ran them, those builds also compiled cuDNN's kernels into the driver's cache
      // (10-16 s a shape more on an H200): what every later run finds is timed on a fresh Attention, another
      // length of the same heads first, as a run's own shape, then the stand-in.
      if (attention_uses_cudnn(int(D)) && first.build_s > 0) {
        cuda::Attention again;
        const auto built = [&](int t) {
          const double b0 = cuda::Attention::plan_build_seconds();
          again.path(cuda::AttnShape{1, t, int(Hq), int(Hkv), int(D)});
          return cuda::Attention::plan_build_seconds() - b0;
        };
        p.attention_plan_build_s = built(int(T) + 4096);
        p.attention_stand_in_build_s = built(kAttentionTuneMaxT);
        std::printf("  %-40s %8.3f s  its stand-in's %.3f s (the driver's kernel cache warm)\n",
                    fmt::format("attention plans built T={} 32/8 D={}", T + 4096, D).c_str(), p.attention_plan_build_s,
                    p.attention_stand_in_build_s);
      }
    }
    // Attention: causal GQA, B=1 Hq=32 Hkv=8, T 2048, 8192 and 32768, D 64 and 128; FLOPs as
    // CostModel::attention counts them. The backward's accumulate adds on the cuDNN path (charged
    // by the sim at hbm rate) are taken out of the measured time first. Fitted: the efficiency
    // half points in T and D (grid search, squared log error over every shape and direction), and
    // for each, the asymptotes that make the model's total time equal the measured total.
    {
      const CostModel cm(p);
      std::vector<AttentionSample> pts;
      for (int64_t T : {2048, 8192, 32768})
        for (int64_t D : {64, 128}) {
          const int64_t Bt = 1, Hq = 32, Hkv = 8;
          const Shape sq{Bt, T, Hq, D}, skv{Bt, T, Hkv, D};
          Buffer q = buf(DType::bf16, sq), k = buf(DType::bf16, skv), v = buf(DType::bf16, skv),
                 o = buf(DType::bf16, sq), lse = buf(DType::f32, {Bt, Hq, T}), dout = buf(DType::bf16, sq),
                 dq = buf(DType::bf16, sq), dk = buf(DType::bf16, skv), dv = buf(DType::bf16, skv);
          randomize(*be, q.view(), 1.0f, 4), randomize(*be, k.view(), 1.0f, 5), randomize(*be, v.view(), 1.0f, 6);
          randomize(*be, dout.view(), 1e-3f, 7);
          be->zero(dq.view()), be->zero(dk.view()), be->zero(dv.view());
          const auto fwd = [&] {
            be->attention_fwd(o.view(), lse.view(), q.view(), k.view(), v.view(), AttnSegments{});
          };
          const auto bwd = [&] {
            be->attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(), v.view(), o.view(),
                              lse.view());
          };
          const FirstCall first = first_call(*be, fwd, bwd);
          const double t_f = tm.per_call(fwd), t_b = tm.per_call(bwd);
          std::printf("  %-40s %8.3f s  plans built %.3f s (the first calls' other work %.3f s)\n",
                      fmt::format("attention first call T={} 32/8 D={}", T, D).c_str(), first.wall_s, first.build_s,
                      first.wall_s - first.build_s - t_f - t_b);
          const double F = 4.0 * Bt * Hq * double(T) * T * D / 2, nq = double(q.view().numel()),
                       nkv = double(k.view().numel());
          double extra = 0;
          if (attention_uses_cudnn(int(D)))
            extra = cm.memory(6 * nq) + 2 * cm.memory(6 * nkv) + (p.attention_dq_accum ? cm.memory(4 * nq) : 0);
          row(fmt::format("attention_fwd T={} 32/8 D={}", T, D), t_f, F / t_f / 1e12, "TFLOP/s");
          row(fmt::format("attention_bwd T={} 32/8 D={}", T, D), t_b, 2.5 * F / t_b / 1e12, "TFLOP/s");
          pts.push_back({double(T), double(D), F, t_f, std::max(t_b - extra, 0.5 * t_b)});
        }
      const AttentionFit af = fit_attention(pts);
      p.attention_half_tokens = af.half_tokens, p.attention_half_dim = af.half_dim;
      p.attention_tflops = af.fwd_tflops, p.attention_bwd_tflops = af.bwd_tflops;
      std::printf(
          "  attention fit: half points T %.0f, D %.0f; asymptotes %.1f / %.1f TFLOP/s (fwd / bwd); rms log "
          "error %.3f (%.3f with one rate for every shape)\n",
          af.half_tokens, af.half_dim, af.fwd_tflops, af.bwd_tflops, af.rms_log_error, af.rms_log_error_flat);
    }

    // Attention past the fit's lengths (--long-attention T): one call to warm up (it tunes on the stand-in), then
    // back-to-back calls for at least a few seconds each way (one call at the longest lengths already runs that
    // long), so the rate is the sustained clock's. The backward's accumulate adds are taken out as above.
    p.attention_long.clear();
    if (a.has("long-attention")) {
      const CostModel cm(p);
      for (int64_t T = 65536; T <= long_max && T <= (int64_t(1) << 30); T *= 2) {
        const int Hq = long_hq, Hkv = long_hkv, D = long_d;
        const double nq = double(T) * Hq * D, nkv = double(T) * Hkv * D;
        const size_t need = long_need(T), room = ar.budget() - ar.in_use();
        if (need > room) {
          std::printf("  attention T=%lld: skipped (needs %s, the arena has %s: this GPU's free memory less 2 GiB)\n",
                      (long long)T, format_bytes(need).c_str(), format_bytes(room).c_str());
          break;
        }
        const Shape sq{1, T, Hq, D}, skv{1, T, Hkv, D};
        Buffer q = buf(DType::bf16, sq), k = buf(DType::bf16, skv), v = buf(DType::bf16, skv), o = buf(DType::bf16, sq),
               lse = buf(DType::f32, {1, Hq, T}), dout = buf(DType::bf16, sq), dq = buf(DType::bf16, sq),
               dk = buf(DType::bf16, skv), dv = buf(DType::bf16, skv);
        randomize(*be, q.view(), 1.0f, 4), randomize(*be, k.view(), 1.0f, 5), randomize(*be, v.view(), 1.0f, 6);
        randomize(*be, dout.view(), 1e-3f, 7);
        be->zero(dq.view()), be->zero(dk.view()), be->zero(dv.view());
        const auto fwd = [&] { be->attention_fwd(o.view(), lse.view(), q.view(), k.view(), v.view(), AttnSegments{}); };
        const auto bwd = [&] {
          be->attention_bwd(dq.view(), dk.view(), dv.view(), dout.view(), q.view(), k.view(), v.view(), o.view(),
                            lse.view());
        };
        const FirstCall first = first_call(*be, fwd, bwd);
        std::printf("  %-40s %8.3f s  plans built %.3f s (tuned on the stand-in, whose plans are built above)\n",
                    fmt::format("attention first call T={} 32/8 D={}", T, D).c_str(), first.wall_s, first.build_s);
        const double min_s = 6.0;  // --quick too: the sustained clock is the point
        const auto sustained = [&](const std::function<void()>& op) {
          op();
          be->synchronize();
          int calls = 0;
          const auto t0 = Clock::now();
          do op(), be->synchronize(), ++calls;
          while (seconds_since(t0) < min_s);
          return seconds_since(t0) / calls;
        };
        const double t_f = sustained(fwd), t_b = sustained(bwd);
        const double F = 4.0 * Hq * double(T) * double(T) * double(D) / 2;
        double extra = 0;
        if (attention_uses_cudnn(int(D)))
          extra = cm.memory(6 * nq) + 2 * cm.memory(6 * nkv) + (p.attention_dq_accum ? cm.memory(4 * nq) : 0);
        const double fwd_tflops = F / t_f / 1e12, bwd_tflops = 2.5 * F / std::max(t_b - extra, 0.5 * t_b) / 1e12;
        row(fmt::format("attention_fwd T={} 32/8 D={} (sustained)", T, D), t_f, fwd_tflops, "TFLOP/s");
        row(fmt::format("attention_bwd T={} 32/8 D={} (sustained)", T, D), t_b, 2.5 * F / t_b / 1e12, "TFLOP/s");
        p.attention_long.push_back({double(T), fwd_tflops, bwd_tflops});
      }
      const CostModel fit_only([&] {
        DeviceProfile q = p;
        q.attention_long.clear();
        return q;
      }());
      for (const auto& r : p.attention_long)
        std::printf("  attention T=%.0f: %.1f / %.1f TFLOP/s sustained (fwd / bwd); the fit alone gives %.1f / %.1f\n",
                    r.tokens, r.fwd_tflops, r.bwd_tflops, fit_only.attention_rate(r.tokens, 128, false) / 1e12,
                    fit_only.attention_rate(r.tokens, 128, true) / 1e12);
    }

    // The disk tier: sequential O_DIRECT bandwidth of DIR, 4 MiB requests at queue depth 8
    // (measure_direct_bandwidth; the write includes the final fdatasync).
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
    if (a.has("disk")) {
      const std::string dir = a.str("disk");
      const size_t bytes = size_t(quick ? 1 : 4) * size_t(kGiB);
      const auto [w, r] = measure_direct_bandwidth(dir, bytes);
      p.disk_write_gbps = w;
      p.disk_read_gbps = r;
      p.disk_source = fmt::format(
          "strata-calibrate --disk {} on {}, {}: O_DIRECT, {} written then read in 4 MiB "
          "requests, queue depth 8",
          dir, dev, date, format_bytes(bytes));
      std::printf("  %-40s %11s %9.2f GB/s\n", fmt::format("disk write {} (O_DIRECT)", dir).c_str(), "", w);
      std::printf("  %-40s %11s %9.2f GB/s\n", fmt::format("disk read {} (O_DIRECT)", dir).c_str(), "", r);
    } else {
      p.disk_write_gbps = p.disk_read_gbps = 0;
      p.disk_source = "not measured (strata-calibrate ran without --disk DIR)";
      std::printf("  %-40s not measured: pass --disk DIR (disk_write_gbps and disk_read_gbps stay 0)\n", "disk tier");
    }

    // CUDA context and library handles: what the device holds beyond the arena once cuBLASLt and
    // cuDNN have run (device-wide: other processes on this GPU would count too).
    const size_t used = be->device_used_bytes();
    if (used > ar.budget() && used - ar.budget() < size_t(8) * kGiB) p.context_bytes = used - ar.budget();
    std::printf("  %-40s %s (before the backend: %s)\n", "context + library handles",
                format_bytes(p.context_bytes).c_str(), format_bytes(total_b - free_b).c_str());

    p.source = fmt::format("strata-calibrate on {}, {}{}", dev, date, quick ? " (--quick)" : "");

    // profile_to_json, plus "calibrated": true after "source" (profile_from_json ignores it); the table compares
    // each number with the built-in profile ("-" for a field the built-in lacks).
    const auto j = nlohmann::ordered_json::parse(profile_to_json(p)),
               jb = nlohmann::ordered_json::parse(profile_to_json(base));
    nlohmann::ordered_json o;
    std::printf("\n  %-34s %16s %16s\n", "profile field", "calibrated", "built-in");
    for (auto& [k, v] : j.items()) {
      o[k] = v;
      if (k == "source") o["calibrated"] = true;
      if (!v.is_number()) continue;
      const bool in_base = jb.contains(k) && jb.at(k).is_number();
      std::printf(
          v.is_number_integer() ? "  %-34s %16.0f %16s\n" : "  %-34s %16.1f %16s\n", k.c_str(), v.get<double>(),
          in_base ? fmt::format("{:.{}f}", jb.at(k).get<double>(), v.is_number_integer() ? 0 : 1).c_str() : "-");
    }
    const std::filesystem::path op(out);
    if (op.has_parent_path()) std::filesystem::create_directories(op.parent_path());
    std::ofstream f(out, std::ios::trunc);
    f << o.dump(2) << "\n";
    f.close();
    if (!f) throw IoError(fmt::format("{}: cannot write the device profile", out), out);
    load_profile(out);  // the sim reads it back
    std::printf("\nwrote %s\n", out.c_str());
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-calibrate: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-calibrate: error: %s\n", e.what());
    return 1;
  }
}
#endif
