// strata-calibrate's host-side measurements (tools/calibrate_host.h).
#include "tools/calibrate_host.h"

#ifdef STRATA_HAVE_CUDA
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/cost_model.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "io/atomic_file.h"
#include "kernels/adamw.h"
#include "kernels/resources_cuda.h"

namespace strata::calibrate {

// AdamW over n elements of state on the host tier, the fp32 recipe with everything on the host
// (state_offloading: all): two ways to run it, timed end to end.
// - streamed through the GPU, as model/optimizer.cpp runs it: chunks of 256 MiB of the masters' i16 low
//   halves, moments and fp32 gradients go up on the main copy lane into three staging blocks, the kernel
//   updates them and the bf16 weights in place, the low halves and moments come back on the second lane
//   (14 B a weight up, 10 down);
// - on the host: cpu::adamw_step_parallel over fp32 masters, moments and gradients in pinned memory,
//   writing bf16 weights that go up chunk by chunk behind the compute (2 B a weight up).
// The gradients' download during backward is the same for both and left out.
void compare_adamw(Backend& be, Arena& ar, bool quick) {
  const size_t n = size_t(quick ? 64 : 256) << 20;
  auto buf = [&](DType dt, size_t k) { return Buffer(ar, dt, Shape{int64_t(k)}, "calibrate"); };
  auto fill = [](void* p, size_t k, float x) {
    parallel_chunks(k, size_t(1) << 22,
                    [&](size_t b, size_t e) { std::fill(static_cast<float*>(p) + b, static_cast<float*>(p) + e, x); });
  };
  AdamWParams ap;
  ap.lr = 1e-5f;
  Buffer nsq = buf(DType::f32, 1);
  be.fill(nsq.view(), 1.0f);
  Buffer hi = buf(be.compute_dtype(), n);
  be.fill(hi.view(), 0.1f);
  auto hi_part = [&](size_t b, size_t k) {
    return Tensor(static_cast<std::byte*>(hi.view().data) + b * dtype_size(be.compute_dtype()), be.compute_dtype(),
                  Shape{int64_t(k)});
  };
  std::printf("\n  AdamW over %zuM weights of state on the host (fp32 recipe, state_offloading: all)\n", n >> 20);

  // Streamed through the GPU.
  double t_gpu = 0;
  {
    const DType mdt = be.master_dtype();  // i16 low halves on cuda
    const size_t me = dtype_size(mdt), per = me + 4 + 4 + 4;
    auto host = be.reserve_host(n * per);
    std::byte* h = host->base();
    std::byte *hlo = h, *hm = hlo + n * me, *hv = hm + n * 4, *hg = hv + n * 4;
    std::memset(hlo, 0, n * me);
    fill(hm, n, 0.01f), fill(hv, n, 0.01f), fill(hg, n, 0.02f);
    const size_t chunk = (size_t(256) << 20) / per / kQuantBlock * kQuantBlock;
    Buffer st[3] = {buf(DType::u8, chunk * per), buf(DType::u8, chunk * per), buf(DType::u8, chunk * per)};
    auto run = [&](int t) {
      CopyTicket out[3] = {0, 0, 0};
      CopyTicket last = 0;
      for (size_t c = 0, b = 0; b < n; ++c, b += chunk) {
        const size_t k = std::min(chunk, n - b), s = c % 3;
        std::byte* d = static_cast<std::byte*>(st[s].view().data);
        const Tensor lo(d, mdt, Shape{int64_t(k)}), m(d + k * me, DType::f32, Shape{int64_t(k)}),
            v(d + k * (me + 4), DType::f32, Shape{int64_t(k)}), g(d + k * (me + 8), DType::f32, Shape{int64_t(k)});
        if (out[s]) be.copy_wait_lane(CopyLane::main, out[s]);
        be.copy_to_device_async(lo, hlo + b * me);
        be.copy_to_device_async(m, hm + b * 4);
        be.copy_to_device_async(v, hv + b * 4);
        const CopyTicket in = be.copy_to_device_async(g, hg + b * 4);
        be.copy_wait_compute(in);
        const Tensor w = hi_part(b, k);
        be.adamw_step({lo, m, v, g, w, Tensor(), Tensor()}, nsq.view(), 1e9f, ap, t);
        be.copy_to_host_async(hlo + b * me, lo, CopyLane::second);
        be.copy_to_host_async(hm + b * 4, m, CopyLane::second);
        out[s] = last = be.copy_to_host_async(hv + b * 4, v, CopyLane::second);
      }
      be.copy_wait_host(last);
      be.synchronize();
    };
    run(1);
    std::vector<double> ts;
    for (int r = 0; r < (quick ? 3 : 5); ++r) {
      const auto t0 = Clock::now();
      run(r + 2);
      ts.push_back(seconds_since(t0));
    }
    std::sort(ts.begin(), ts.end());
    t_gpu = ts[ts.size() / 2];
    std::printf("  %-40s %8.1f ms %9.2f Gweights/s (%.1f GB/s over the link)\n", "streamed through the GPU",
                t_gpu * 1e3, double(n) / t_gpu / 1e9, double(n) * double(per + me + 8) / t_gpu / 1e9);
  }

  // On the host, every thread count up to the cores.
  {
    auto host = be.reserve_host(n * 18);
    std::byte* h = host->base();
    auto *master = reinterpret_cast<float*>(h), *m = master + n, *v = m + n, *g = v + n;
    auto* w = reinterpret_cast<uint16_t*>(g + n);
    fill(master, n, 0.1f), fill(m, n, 0.01f), fill(v, n, 0.01f), fill(g, n, 0.02f);
    const size_t chunk = size_t(16) << 20;
    auto run = [&](size_t threads, int t) {
      CopyTicket last = 0;
      for (size_t b = 0; b < n; b += chunk) {
        const size_t k = std::min(chunk, n - b);
        AdamWState s;
        s.master = master + b, s.weights = w + b, s.weights_dtype = DType::bf16;
        s.m = m + b, s.v = v + b, s.g = g + b, s.n = k;
        cpu::adamw_step_parallel(s, ap, t, 1.0f, threads);
        last = be.copy_to_device_async(hi_part(b, k), w + b);
      }
      be.copy_wait_host(last);
    };
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    std::vector<size_t> counts;
    for (size_t k = 1; k < cores; k *= 2) counts.push_back(k);
    counts.push_back(cores);
    double best = 1e300;
    for (size_t threads : counts) {
      run(threads, 1);
      std::vector<double> ts;
      for (int r = 0; r < (quick ? 2 : 3); ++r) {
        const auto t0 = Clock::now();
        run(threads, r + 2);
        ts.push_back(seconds_since(t0));
      }
      std::sort(ts.begin(), ts.end());
      const double t = ts[ts.size() / 2];
      best = std::min(best, t);
      std::printf("  %-40s %8.1f ms %9.2f Gweights/s (%.1f GB/s of host memory)\n",
                  fmt::format("host AdamW, {} thread{}", threads, threads > 1 ? "s" : "").c_str(), t * 1e3,
                  double(n) / t / 1e9, 30.0 * double(n) / t / 1e9);
    }
    std::printf("  faster: %s (%.2fx)\n", best < t_gpu ? "host AdamW" : "streamed through the GPU",
                best < t_gpu ? t_gpu / best : best / t_gpu);
  }
}

// /proc/meminfo's field in bytes (0 when absent).
size_t meminfo_bytes(const char* field) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == std::string(field) + ":") return kb << 10;
  }
  return 0;
}

// --host-fill: pinned reservations of 8 GiB, each held, until the host runs low (kUsage).
namespace {
std::string date_today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&now));
  return buf;
}
}  // namespace

int host_fill(const std::string& out) {
  const size_t block = size_t(8) * kGiB, total = meminfo_bytes("MemTotal");
  const size_t floor = std::max(size_t(16) * kGiB, total / 10);
  std::printf("strata-calibrate --host-fill: MemTotal %s, stops at MemAvailable %s\n", format_bytes(total).c_str(),
              format_bytes(floor).c_str());
  std::printf("  %10s %12s %12s %10s %14s\n", "pinned", "MemAvailable", "Cached", "seconds", "GB/s");
  std::vector<std::unique_ptr<cuda::CudaHostMemory> > held;
  std::vector<double> secs;  // each reservation's time
  const Clock::time_point start = Clock::now();
  size_t pinned = 0;
  while (meminfo_bytes("MemAvailable") > floor + block) {
    const size_t avail = meminfo_bytes("MemAvailable"), cached = meminfo_bytes("Cached");
    const Clock::time_point t0 = Clock::now();
    held.push_back(std::make_unique<cuda::CudaHostMemory>(block));
    const double t = seconds_since(t0);
    secs.push_back(t);
    pinned += block;
    std::printf("  %10s %12s %12s %10.3f %14.2f   at %.1f s\n", format_bytes(pinned).c_str(),
                format_bytes(avail).c_str(), format_bytes(cached).c_str(), t, double(block) / t / 1e9,
                seconds_since(start));
    std::fflush(stdout);
  }
  if (pinned == 0) {
    std::printf("  nothing pinned: the host has %s available, under %s\n",
                format_bytes(meminfo_bytes("MemAvailable")).c_str(), format_bytes(floor + block).c_str());
    return 0;
  }
  std::printf("  %s pinned in %.2f s: %.2f GB/s overall\n", format_bytes(pinned).c_str(), seconds_since(start),
              double(pinned) / seconds_since(start) / 1e9);
  // First touch: the reservations slower than half the fastest one's rate (memory the machine had not touched
  // since it started; the rest was touched before and pins at the warm rate).
  const double fastest = *std::min_element(secs.begin(), secs.end());
  size_t slow_n = 0;
  double slow_s = 0;
  for (double t : secs)
    if (t > 2 * fastest) slow_n++, slow_s += t;
  if (slow_n == 0) {
    std::printf(
        "  no reservation under half the fastest's rate: this machine touched all of it before; a fresh "
        "machine's first-touch rate (pinned_first_touch_gbps) needs a machine's first run\n");
    return 0;
  }
  const double first_touch = double(slow_n * block) / slow_s / 1e9;
  std::printf(
      "  first touch: %zu of %zu reservations under half the fastest's rate, %s at %.2f GB/s "
      "(pinned_first_touch_gbps)\n",
      slow_n, secs.size(), format_bytes(slow_n * block).c_str(), first_touch);
  if (out.empty()) return 0;
  // Into the profile at `out`: the field and its source, the file replaced whole (io::write_file_atomic).
  std::ifstream in(out);
  if (!in) throw IoError(fmt::format("{}: cannot read the device profile to add pinned_first_touch_gbps to", out), out);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not a JSON device profile ({})", out, e.what()), out, "");
  }
  j["pinned_first_touch_gbps"] = first_touch;
  const std::string note = fmt::format(
      "pinned_first_touch_gbps: strata-calibrate --host-fill, the {} of its {} reservations of 8 GiB under half the "
      "fastest one's rate, {}",
      slow_n, secs.size(), date_today());
  j["source"] = j.contains("source") && j["source"].is_string() ? j["source"].get<std::string>() + "; " + note : note;
  profile_from_json(j.dump(), out);  // refuses what the sim would refuse, before anything is written
  io::write_file_atomic(out, j.dump(2) + "\n");
  std::printf("  wrote pinned_first_touch_gbps %.2f into %s\n", first_touch, out.c_str());
  return 0;
}

}  // namespace strata::calibrate
#endif
