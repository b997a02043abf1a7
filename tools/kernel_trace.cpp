// CUPTI activity tracing for strata-bench (STRATA_KERNEL_TRACE=1); see kernel_trace.h.
#include "tools/kernel_trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>

#include "engine/switches.h"

#if defined(STRATA_HAVE_CUDA) && __has_include(<cupti.h>)
#define STRATA_HAVE_CUPTI 1
#include <cupti.h>
#include <dlfcn.h>
#endif

namespace strata::tools {

std::vector<KernelTime> summarize_kernels(const std::map<std::string, std::pair<double, long>>& totals) {
  std::vector<KernelTime> rows;
  for (const auto& [name, t] : totals) rows.push_back({name, t.first, t.second});
  std::sort(rows.begin(), rows.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms != b.ms ? a.ms > b.ms : a.name < b.name; });
  return rows;
}

std::string format_kernel_table(const std::vector<KernelTime>& rows, int steps, int top) {
  const double per = steps > 0 ? 1.0 / steps : 1.0;
  double total = 0;
  long launches = 0;
  for (const KernelTime& r : rows) {
    total += r.ms;
    launches += r.launches;
  }
  char line[256];
  std::snprintf(line, sizeof line, "strata kernel trace: %.2f ms GPU time a step in %ld launches of %zu kernels\n",
                total * per, long(double(launches) * per + 0.5), rows.size());
  std::string out = line;
  for (int i = 0; i < top && i < int(rows.size()); i++) {
    const KernelTime& r = rows[size_t(i)];
    std::snprintf(line, sizeof line, "  %9.3f ms %5.1f%% %5ld  %.110s\n", r.ms * per,
                  total > 0 ? 100 * r.ms / total : 0.0, long(double(r.launches) * per + 0.5), r.name.c_str());
    out += line;
  }
  return out;
}

Timeline summarize_timeline(std::vector<KernelSpan> iv) {
  Timeline t;
  if (iv.empty()) return t;
  std::sort(iv.begin(), iv.end(), [](const KernelSpan& a, const KernelSpan& b) {
    return a.start != b.start ? a.start < b.start : a.end < b.end;
  });
  auto name = [](const KernelSpan& k) { return k.name ? *k.name : std::string("?"); };
  uint64_t busy = 0, cur_b = iv[0].start, cur_e = iv[0].end, last_end = iv[0].end;
  size_t last_i = 0;  // the span that ends the current busy stretch
  for (size_t i = 1; i < iv.size(); i++) {
    if (iv[i].start > cur_e) {
      busy += cur_e - cur_b;
      const uint64_t g = iv[i].start - cur_e;
      const double ms = double(g) * 1e-6;
      t.idle_ms += ms;
      t.longest_gap_ms = std::max(t.longest_gap_ms, ms);
      if (g > 20000) {
        t.gaps_over_20us++;
        t.gaps_over_20us_ms += ms;
      }
      if (t.longest.size() < Timeline::kLongest || ms > t.longest.back().ms) {
        if (t.longest.size() == Timeline::kLongest) t.longest.pop_back();
        Timeline::Gap gap{ms, name(iv[last_i]), name(iv[i])};
        auto at = std::find_if(t.longest.begin(), t.longest.end(), [&](const Timeline::Gap& x) { return x.ms < ms; });
        t.longest.insert(at, std::move(gap));
      }
      cur_b = iv[i].start;
      cur_e = iv[i].end;
      last_i = i;
    } else if (iv[i].end >= cur_e) {
      cur_e = iv[i].end;
      last_i = i;
    }
    last_end = std::max(last_end, iv[i].end);
  }
  busy += cur_e - cur_b;
  t.busy_ms = double(busy) * 1e-6;
  t.span_ms = double(last_end - iv[0].start) * 1e-6;
  return t;
}

std::string format_timeline(const Timeline& t, int steps) {
  const double per = steps > 0 ? 1.0 / steps : 1.0;
  char line[320];
  std::snprintf(line, sizeof line,
                "strata kernel timeline: %.2f ms span a step, GPU busy %.2f ms, idle %.2f ms (%.1f%%); "
                "%.1f gaps over 20 us a step totalling %.2f ms, longest %.3f ms\n",
                t.span_ms * per, t.busy_ms * per, t.idle_ms * per, t.span_ms > 0 ? 100 * t.idle_ms / t.span_ms : 0.0,
                double(t.gaps_over_20us) * per, t.gaps_over_20us_ms * per, t.longest_gap_ms);
  std::string out = line;
  for (const Timeline::Gap& g : t.longest) {
    std::snprintf(line, sizeof line, "  gap %8.3f ms after %.60s, before %.60s\n", g.ms, g.before.c_str(),
                  g.after.c_str());
    out += line;
  }
  return out;
}

#ifdef STRATA_HAVE_CUPTI
namespace {

// The CUPTI entry points, resolved from the library at run time (no link-time dependency).
struct Cupti {
  void* lib = nullptr;
  std::string path;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;

  bool load(std::string* why) {
    if (lib) return true;
    std::vector<std::string> tries;
    if (!switches().cupti_lib.empty()) tries.push_back(switches().cupti_lib);
    for (const char* p : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                          "/usr/local/cuda/lib64/libcupti.so"})
      tries.push_back(p);
    std::string last_error;
    for (const std::string& p : tries) {
      if ((lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        path = p;
        break;
      }
      if (const char* e = dlerror()) last_error = e;
    }
    if (!lib) {
      *why =
          "libcupti could not be loaded (tried $STRATA_CUPTI_LIB, libcupti.so.13, libcupti.so and the CUDA "
          "toolkit's; set STRATA_CUPTI_LIB to its path, e.g. torch's nvidia/cu13/lib/libcupti.so.13); last: " +
          last_error;
      return false;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn != nullptr;
    };
    sym(register_callbacks, "cuptiActivityRegisterCallbacks");
    sym(enable, "cuptiActivityEnable");
    sym(disable, "cuptiActivityDisable");
    sym(flush_all, "cuptiActivityFlushAll");
    sym(next_record, "cuptiActivityGetNextRecord");
    sym(dropped, "cuptiActivityGetNumDroppedRecords");
    sym(result_string, "cuptiGetResultString");
    if (!ok) {
      *why = path + " lacks the CUPTI activity API";
      dlclose(lib);
      lib = nullptr;
    }
    return ok;
  }
  std::string error(CUptiResult r) const {
    const char* s = nullptr;
    if (result_string) result_string(r, &s);
    return s ? s : "CUPTI error " + std::to_string(int(r));
  }
};

Cupti& cupti() {
  static Cupti c;
  return c;
}

struct Collector {
  std::mutex mu;
  std::map<std::string, std::pair<double, long>> totals;
  std::vector<KernelSpan> intervals;  // every kernel; names point at totals' keys
  size_t dropped = 0;
  size_t incomplete = 0;  // kernels a forced flush handed over unfinished
  bool active = false;
};

Collector& collector() {
  static Collector c;
  return c;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Collector& c = collector();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    CUpti_Activity* rec = nullptr;
    while (valid > 0 && cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      // start, end and name sit at the same offsets in every kernel record version since 4.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      // A forced flush hands over kernels still running without their timestamps: not a span to count.
      if (k->start == 0 || k->end < k->start) {
        ++c.incomplete;
        continue;
      }
      auto it = c.totals.try_emplace(k->name ? k->name : "(unnamed)").first;
      it->second.first += double(k->end - k->start) * 1e-6;
      it->second.second += 1;
      c.intervals.push_back({uint64_t(k->start), uint64_t(k->end), &it->first});
    }
    size_t dropped = 0;
    if (cupti().dropped(ctx, stream, &dropped) == CUPTI_SUCCESS) c.dropped += dropped;
  }
  std::free(buffer);
}

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::start(std::string* why) {
  Cupti& cu = cupti();
  if (!cu.load(why)) return nullptr;
  Collector& c = collector();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.active) {
      *why = "a kernel trace is already running in this process";
      return nullptr;
    }
    c.totals.clear();
    c.intervals.clear();
    c.dropped = 0;
    c.incomplete = 0;
    c.active = true;
  }
  CUptiResult r = cu.register_callbacks(buffer_requested, buffer_completed);
  if (r == CUPTI_SUCCESS) r = cu.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    *why = cu.path + ": " + cu.error(r);
    std::lock_guard<std::mutex> lock(c.mu);
    c.active = false;
    return nullptr;
  }
  std::unique_ptr<KernelTrace> t(new KernelTrace());
  t->library_ = cu.path;
  t->running_ = true;
  return t;
}

std::vector<KernelTime> KernelTrace::stop() {
  if (!running_) return {};
  running_ = false;
  Cupti& cu = cupti();
  cu.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cu.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  Collector& c = collector();
  std::lock_guard<std::mutex> lock(c.mu);
  c.active = false;
  if (c.dropped > 0) std::fprintf(stderr, "strata kernel trace: CUPTI dropped %zu records\n", c.dropped);
  if (c.incomplete > 0)
    std::fprintf(stderr, "strata kernel trace: %zu kernels still running at the stop were not counted\n", c.incomplete);
  timeline_ = summarize_timeline(std::move(c.intervals));
  c.intervals.clear();
  return summarize_kernels(c.totals);
}

KernelTrace::~KernelTrace() {
  if (running_) stop();
}

#else  // no CUPTI in this build

std::unique_ptr<KernelTrace> KernelTrace::start(std::string* why) {
  *why = "this build has no CUDA (CUPTI) support";
  return nullptr;
}
std::vector<KernelTime> KernelTrace::stop() {
  return {};
}
KernelTrace::~KernelTrace() = default;

#endif

}  // namespace strata::tools
