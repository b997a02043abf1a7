// Attention through cuDNN's backend graph API, with the flash fallback where cuDNN declines.
//
// Why a generic graph and not CUDNN_BACKEND_OPERATION_SDPA_{FWD,BWD}_DESCRIPTOR: in cuDNN 9.14-9.19
// those descriptors take Q/K/V/O/stats/scale (+ block-sparse mask, paging, seq lens) but have no
// causal mask (masks arrive with the SDPA subgraph attribute in 9.21), and SDPA_BWD only exists
// from 9.17. So we build the graph cudnn-frontend's sdpa / sdpa_backward nodes lower to:
// matmul, pointwise (scale, gen_index + cmp_ge + binary_select for the causal mask, softmax
// pieces) and reductions, which cuDNN pattern-matches onto its fused flash-attention engines.
// Logical dims are [b, h, s, d] with strides describing our BSHD memory; K (and V in backward)
// enter transposed ([b, h, d, s]) as the backend expects.
#include <cudnn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "kernels/attention_cuda.h"
#include "kernels/attention_workspace.h"
#include "kernels/cudnn_graph.h"
#include "kernels/tune_costs.h"
#include "kernels/tune_picks.h"

namespace strata::cuda {
namespace {

using namespace cudnn_graph;

std::atomic<bool> g_force_fallback{false};
std::atomic<int> g_force_fwd{-1}, g_force_bwd{-1};       // Attention::set_force_candidate
std::atomic<int64_t> g_build_ns{0}, g_last_build_ns{0};  // Attention::plan_build_seconds, last_plan_build_seconds

enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNeg,
  kdO,
  kdQ,
  kdK,
  kdV,
  kOne,
  kSoftmaxSum,
  kdQAccum,
};
static_assert(kdQAccum < kFirstVirtualUid);

struct Plan {
  std::unique_ptr<Graph> graph;
  bool dq_accum = false;     // backward: fp32 dQ accumulator in ws
  bool causal_first = true;  // backward: mask before subtracting the stats
  bool k_f32 = false;        // backward: K enters dQ = dS K as an fp32 view
  bool modern = false;       // backward: today's frontend graph (no dP * 1 without dropout, GEN_INDEX in fp32)
  float scale = 1.0f, neg = -FLT_MAX, one = 1.0f;  // by-value scalars read at execute
};

// Dims/strides of the logical [b, h, s, d] view of BSHD memory.
Dims bshd_stride(int64_t h, int64_t s, int64_t d) {
  return {s * h * d, d, h * d, 1};
}

// s where row >= col else -FLT_MAX (what cudnn-frontend's causal mask lowers to). The index tensors
// are INT32; index_prec is GEN_INDEX's compute type (older frontends INT32, today's the graph's fp32).
Desc causal(Graph& g, Desc x, Desc neg, Dims ss, Dims ss_st, cudnnDataType_t index_prec = CUDNN_DATA_INT32) {
  Desc row = g.virt(CUDNN_DATA_INT32, ss, ss_st), col = g.virt(CUDNN_DATA_INT32, ss, ss_st);
  g.pw(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, index_prec, 2);
  g.pw(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, index_prec, 3);
  Desc mask = g.virt(CUDNN_DATA_BOOLEAN, ss, ss_st);
  g.pw(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, mask, CUDNN_DATA_BOOLEAN);
  Desc y = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.pw(CUDNN_POINTWISE_BINARY_SELECT, x, neg, mask, y);
  return y;
}

std::unique_ptr<Plan> build_fwd(cudnnHandle_t h, const AttnShape& s) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::make_unique<Graph>(h);
  Graph& g = *plan->graph;
  const int64_t b = s.B, hq = s.Hq, hk = s.Hkv, t = s.T, d = s.D;
  const Dims ss{b, hq, t, t}, ss_st{hq * t * t, t * t, t, 1}, row{b, hq, t, 1}, row_st{hq * t, t, 1, 1};
  Desc Q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc KT = g.tensor(kK, CUDNN_DATA_BFLOAT16, {b, hk, d, t}, {t * hk * d, d, 1, hk * d});
  Desc V = g.tensor(kV, CUDNN_DATA_BFLOAT16, {b, hk, t, d}, bshd_stride(hk, t, d));
  Desc O = g.tensor(kO, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row, row_st);
  Desc scale = g.scalar(kScale), neg = g.scalar(kNeg);

  Desc s0 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), s1 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.matmul(Q, KT, s0);
  g.pw(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1);
  Desc s2 = causal(g, s1, neg, ss, ss_st);
  Desc m = g.virt(CUDNN_DATA_FLOAT, row, row_st), z = g.virt(CUDNN_DATA_FLOAT, row, row_st);
  Desc s3 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), e = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, s2, m);
  g.pw(CUDNN_POINTWISE_SUB, s2, m, nullptr, s3);
  g.pw(CUDNN_POINTWISE_EXP, s3, nullptr, nullptr, e);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, z);
  Desc logz = g.virt(CUDNN_DATA_FLOAT, row, row_st);
  g.pw(CUDNN_POINTWISE_LOG, z, nullptr, nullptr, logz);
  g.pw(CUDNN_POINTWISE_ADD, m, logz, nullptr, stats);  // stats = max + log(sum exp(s - max))
  Desc p = g.virt(CUDNN_DATA_BFLOAT16, ss, ss_st);     // P enters the second matmul as bf16
  g.pw(CUDNN_POINTWISE_DIV, e, z, nullptr, p);
  g.matmul(p, V, O);
  g.finalize_plans();
  plan->scale = 1.0f / std::sqrt(float(s.D));
  return plan;
}

// causal_first: mask before subtracting the stats (frontend <= 1.7) or after (later frontends).
// dq_accum: dQ through an fp32 accumulator in workspace (frontend default on cuDNN 9) or direct.
// k_f32: K reshaped to an fp32 virtual for dQ = dS K, as cudnn-frontend 1.18 writes it.
// modern: as the newest frontend lowers it without dropout: dP enters dP - softmax_sum directly (older
// ones multiply it by a dropout scale of 1 first) and GEN_INDEX computes in fp32.
std::unique_ptr<Plan> build_bwd(cudnnHandle_t h, const AttnShape& s, bool causal_first, bool dq_accum, bool k_f32,
                                bool modern) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::make_unique<Graph>(h);
  plan->dq_accum = dq_accum;
  plan->causal_first = causal_first;
  plan->k_f32 = k_f32;
  plan->modern = modern;
  const cudnnDataType_t index_prec = modern ? CUDNN_DATA_FLOAT : CUDNN_DATA_INT32;
  Graph& g = *plan->graph;
  const int64_t b = s.B, hq = s.Hq, hk = s.Hkv, t = s.T, d = s.D;
  const Dims ss{b, hq, t, t}, ss_st{hq * t * t, t * t, t, 1}, row{b, hq, t, 1}, row_st{hq * t, t, 1, 1};
  const Dims ss_tr{hq * t * t, t * t, 1, t};  // [b, h, s_kv, s_q] view of an [.., s_q, s_kv] tensor
  const Dims full{b, hq, t, d}, full_st{hq * t * d, t * d, d, 1};
  Desc Q = g.tensor(kQ, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc KT = g.tensor(kK, CUDNN_DATA_BFLOAT16, {b, hk, d, t}, {t * hk * d, d, 1, hk * d});
  Desc VT = g.tensor(kV, CUDNN_DATA_BFLOAT16, {b, hk, d, t}, {t * hk * d, d, 1, hk * d});
  Desc O = g.tensor(kO, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc dO = g.tensor(kdO, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row, row_st);
  Desc dQ = g.tensor(kdQ, CUDNN_DATA_BFLOAT16, {b, hq, t, d}, bshd_stride(hq, t, d));
  Desc dK = g.tensor(kdK, CUDNN_DATA_BFLOAT16, {b, hk, t, d}, bshd_stride(hk, t, d));
  Desc dV = g.tensor(kdV, CUDNN_DATA_BFLOAT16, {b, hk, t, d}, bshd_stride(hk, t, d));
  Desc scale = g.scalar(kScale), neg = g.scalar(kNeg), one = g.scalar(kOne);

  // softmax_sum = rowsum(dO * O) [b, h, s, 1], materialised in workspace
  Desc doo = g.virt(CUDNN_DATA_FLOAT, full, {hq * t * d, t * d, hq * d, 1});
  Desc r = g.virt(CUDNN_DATA_FLOAT, row, row_st);
  Desc ssum = g.tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row, row_st);
  g.pw(CUDNN_POINTWISE_MUL, dO, O, nullptr, doo);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, doo, r);
  g.pw(CUDNN_POINTWISE_MUL, r, one, nullptr, ssum);

  // P = exp(scale Q K^T (masked) - stats)
  Desc s0 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), s1 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.matmul(Q, KT, s0);
  g.pw(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1);
  if (causal_first) s1 = causal(g, s1, neg, ss, ss_st, index_prec);
  Desc s2 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.pw(CUDNN_POINTWISE_SUB, s1, stats, nullptr, s2);
  if (!causal_first) s2 = causal(g, s2, neg, ss, ss_st, index_prec);
  Desc e = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.pw(CUDNN_POINTWISE_EXP, s2, nullptr, nullptr, e);

  // dV = P^T dO (summed over the query heads of a group for GQA)
  Desc pt = g.virt(CUDNN_DATA_BFLOAT16, ss, ss_tr);
  g.reshape(e, pt);
  if (hq == hk) {
    g.matmul(pt, dO, dV);
  } else {
    Desc dv_full = g.virt(CUDNN_DATA_BFLOAT16, full, full_st);
    g.matmul(pt, dO, dv_full);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, dv_full, dV);
  }

  // dS = scale * P * (dO V^T - softmax_sum)
  Desc dp = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), dp1 = dp;
  Desc dp2 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), ds0 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  Desc ds = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.matmul(dO, VT, dp);
  if (!modern) {
    dp1 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
    g.pw(CUDNN_POINTWISE_MUL, dp, one, nullptr, dp1);
  }
  g.pw(CUDNN_POINTWISE_SUB, dp1, ssum, nullptr, dp2);
  g.pw(CUDNN_POINTWISE_MUL, dp2, e, nullptr, ds0);
  g.pw(CUDNN_POINTWISE_MUL, ds0, scale, nullptr, ds);

  // dK = dS^T Q (group-summed for GQA)
  Desc dst = g.virt(CUDNN_DATA_BFLOAT16, ss, ss_tr);
  g.reshape(ds, dst);
  if (hq == hk) {
    g.matmul(dst, Q, dK);
  } else {
    Desc dk_full = g.virt(CUDNN_DATA_BFLOAT16, full, full_st);
    g.matmul(dst, Q, dk_full);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, dk_full, dK);
  }

  // dQ = dS K
  Desc k = g.virt(k_f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16, {b, hk, t, d}, bshd_stride(hk, t, d));
  g.reshape(KT, k);
  if (dq_accum) {
    Desc acc = g.tensor(kdQAccum, CUDNN_DATA_FLOAT, full, full_st);
    g.matmul(ds, k, acc);
    g.pw(CUDNN_POINTWISE_IDENTITY, acc, nullptr, nullptr, dQ);
  } else {
    g.matmul(ds, k, dQ);
  }
  g.finalize_plans();
  plan->scale = 1.0f / std::sqrt(float(s.D));
  return plan;
}

size_t align256(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Backward workspace: [plan ws][softmax_sum][dQ accumulator][dq, dk, dv scratch for accumulate].
// The plan-ws region is `plan_region` bytes, reserved for every candidate plan of the shape (see
// attention_workspace.h), so the arena sees the same workspace whichever plan the tuner picks.
struct BwdLayout {
  size_t ssum, acc, sdq, sdk, sdv, total;
  BwdLayout(const AttnShape& s, size_t plan_region, bool dq_accum) {
    const size_t rows = size_t(s.B) * s.Hq * s.T;
    const size_t nq = rows * s.D, nkv = size_t(s.B) * s.Hkv * s.T * s.D;
    ssum = align256(plan_region);
    acc = ssum + align256(rows * sizeof(float));
    sdq = acc + (dq_accum ? align256(nq * sizeof(float)) : 0);
    sdk = sdq + align256(nq * sizeof(bf16));
    sdv = sdk + align256(nkv * sizeof(bf16));
    total = sdv + align256(nkv * sizeof(bf16));
  }
};

// Runs one execution plan; a cuDNN failure throws Declined.
void execute_plan(cudnnHandle_t h, Desc plan, const std::vector<int64_t>& uids, std::vector<void*> ptrs, void* ws,
                  cudaStream_t st) {
  DNN(cudnnSetStream(h, st));
  Desc vp = nullptr;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
  try {
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    DNN(cudnnBackendFinalize(vp));
    DNN(cudnnBackendExecute(h, plan, vp));
  } catch (...) {
    cudnnBackendDestroyDescriptor(vp);
    throw;
  }
  cudnnBackendDestroyDescriptor(vp);
}

void* cp(const void* p) {
  return const_cast<void*>(p);
}

}  // namespace

struct Attention::Impl {
  bool tried = false;
  cudnnHandle_t handle = nullptr;
  std::string unavailable;  // why cuDNN cannot be used at all
  const bool tune = switches().attn_tune;
  const bool verbose = switches().attn_verbose;

  // One runnable choice: a graph variant and one of its candidate plans.
  struct Choice {
    const Plan* plan = nullptr;
    size_t cand = 0;
  };
  struct Entry {
    std::unique_ptr<Plan> fwd;
    std::vector<std::unique_ptr<Plan>> bwd;          // graph variants that finalize; bwd[0] is the default
    size_t fwd_region = 0, bwd_region = 0;           // plan-ws bytes reserved (fits every eligible candidate)
    std::vector<Choice> fwd_eligible, bwd_eligible;  // in heuristic order; [0] = cuDNN's own pick
    Choice fwd_pick, bwd_pick;
    bool fwd_tuned = false, bwd_tuned = false;
    std::string path;
  };
  std::map<std::array<int, 5>, Entry> cache;

  size_t version = 0;  // the cuDNN runtime's, from init()
  bool init() {
    if (!tried) {
      tried = true;
      const size_t v = cudnnGetVersion();
      version = v;
      if (v < 90000) {
        unavailable = fmt::format("cuDNN runtime {} is older than 9.0", v);
      } else if (cudnnStatus_t st = cudnnCreate(&handle); st != CUDNN_STATUS_SUCCESS) {
        unavailable = fmt::format("cudnnCreate failed: {}", cudnnGetErrorString(st));
        handle = nullptr;
      }
    }
    return handle != nullptr;
  }

  // The plan-ws region: cuDNN's own pick always fits; other candidates only within the budget of
  // attention_tune_budget (a pure function of the shape, so the sim can reproduce the arena).
  static void choose_region(const std::vector<const Plan*>& plans, size_t budget, bool dq_accum_region, size_t* region,
                            std::vector<Choice>* eligible) {
    *region = std::max(size_t(plans[0]->graph->candidates[0].ws), budget);
    for (const Plan* p : plans) {
      if (p->dq_accum && !dq_accum_region) continue;
      for (size_t i = 0; i < p->graph->candidates.size(); i++)
        if (size_t(p->graph->candidates[i].ws) <= *region) eligible->push_back({p, i});
    }
  }

  Entry& entry(const AttnShape& s) {
    std::array<int, 5> key{s.B, s.T, s.Hq, s.Hkv, s.D};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Entry& e = cache[key];
    const auto t0 = std::chrono::steady_clock::now();
    if (!init()) {
      e.path = "fallback: " + unavailable;
    } else if (!attention_uses_cudnn(s.D)) {
      e.path = fmt::format("fallback: cuDNN needs head dim % 8 == 0 and <= 256 (D = {})", s.D);
    } else {
      try {
        e.fwd = build_fwd(handle, s);
      } catch (const Declined& ex) {
        e.path = std::string("fallback: cuDNN declined forward: ") + ex.what();
      }
      if (e.fwd) {
        std::string why;
        // The first variant that finalizes is the default; the others are tuning candidates.
        // {causal_first, dq_accum, k_f32, modern}
        constexpr std::array<std::array<bool, 4>, 8> variants{{{true, true, false, false},
                                                               {false, true, false, false},
                                                               {false, true, true, false},
                                                               {true, true, true, false},
                                                               {false, true, true, true},
                                                               {true, true, true, true},
                                                               {true, false, false, false},
                                                               {false, false, false, false}}};
        for (auto [causal_first, dq_accum, k_f32, modern] : variants) {
          try {
            e.bwd.push_back(build_bwd(handle, s, causal_first, dq_accum, k_f32, modern));
          } catch (const Declined& ex) {
            why += fmt::format(" [causal_first={} dq_accum={} k_f32={} modern={}: {}]", causal_first, dq_accum, k_f32,
                               modern, ex.what());
          }
          if (!tune && !e.bwd.empty()) break;
        }
        if (e.bwd.empty()) {
          e.fwd.reset();
          e.path = "fallback: cuDNN declined backward:" + why;
        }
      }
      if (e.fwd && !e.bwd.empty()) {
        e.path = "cudnn";
        choose_region({e.fwd.get()}, attention_tune_budget(s.B, s.T, s.Hq, s.Hkv, s.D, false), true, &e.fwd_region,
                      &e.fwd_eligible);
        std::vector<const Plan*> b;
        for (auto& p : e.bwd) b.push_back(p.get());
        choose_region(b, attention_tune_budget(s.B, s.T, s.Hq, s.Hkv, s.D, true), e.bwd[0]->dq_accum, &e.bwd_region,
                      &e.bwd_eligible);
        e.fwd_pick = e.fwd_eligible[0];
        e.bwd_pick = e.bwd_eligible[0];
        e.fwd_tuned = e.bwd_tuned = !tune;
      }
    }
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    g_build_ns.fetch_add(ns);
    g_last_build_ns.store(ns);
    if (verbose)
      std::fprintf(stderr,
                   "strata attention B=%d T=%d Hq=%d Hkv=%d D=%d: plans built in %.3f s (%s, %zu backward variants)\n",
                   s.B, s.T, s.Hq, s.Hkv, s.D, double(ns) * 1e-9, e.path.c_str(), e.bwd.size());
    return e;
  }

  Entry* cudnn_entry(const AttnShape& s) {
    if (g_force_fallback.load()) return nullptr;
    Entry& e = entry(s);
    return e.fwd ? &e : nullptr;
  }

  // Times every eligible choice on the call's own buffers (`run` executes one and may throw
  // Declined), keeps the fastest, and leaves the outputs to the caller's final run.
  template <class Run>
  Choice tune_choice(const char* what, const AttnShape& s, const std::vector<Choice>& eligible, size_t region,
                     cudaStream_t st, Run&& run) {
    if (eligible.size() < 2) return eligible[0];
    const std::array<int, 6> key{s.B, s.T, s.Hq, s.Hkv, s.D, what[0] == 'b'};
    if (int i = picks().get(key); i >= 0 && i < int(eligible.size())) return eligible[i];
    cudaEvent_t a = nullptr, b = nullptr;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    Choice best = eligible[0];
    float best_ms = FLT_MAX;
    int best_i = 0;
    std::string log;
    for (const Choice& c : eligible) {
      const auto& cand = c.plan->graph->candidates[c.cand];
      std::string label =
          fmt::format("{}{}", cand.label, c.plan->graph == eligible[0].plan->graph ? "" : variant_label(*c.plan));
      float ms = FLT_MAX;
      try {
        run(c);  // warm-up (also loads the kernel)
        cudaEventRecord(a, st);
        for (int r = 0; r < kTuneReps; r++) run(c);
        cudaEventRecord(b, st);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        ms /= kTuneReps;
      } catch (const Declined& ex) {
        label += std::string(" (failed: ") + ex.what() + ")";
      }
      if (cudaGetLastError() != cudaSuccess) ms = FLT_MAX;
      log += fmt::format("\n    {:>9.3f} ms  ws {:>10}  {}", ms == FLT_MAX ? -1.0 : ms, cand.ws, label);
      // A later candidate must win by kTuneMargin: timing noise should not flip the pick.
      if (ms < best_ms * (best_ms == FLT_MAX ? 1.0f : 1.0f - kTuneMargin)) {
        best_ms = ms;
        best = c;
        best_i = int(&c - eligible.data());
      }
    }
    picks().put(key, best_i);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (verbose)
      std::fprintf(stderr, "strata attention %s B=%d T=%d Hq=%d Hkv=%d D=%d: %zu candidates, region %zu B:%s\n", what,
                   s.B, s.T, s.Hq, s.Hkv, s.D, eligible.size(), region, log.c_str());
    return best;
  }

  // The candidate to run: the forced one (tests), else the tuned pick (tuned on the first call).
  template <class Run>
  const Choice& pick(const char* what, const AttnShape& s, const std::vector<Choice>& eligible, int forced,
                     Choice& picked, bool& tuned, size_t region, cudaStream_t st, Run run) {
    if (forced >= 0) {
      STRATA_CHECK(size_t(forced) < eligible.size(),
                   fmt::format("attention {}: forced candidate {} of {}", what, forced, eligible.size()));
      return eligible[size_t(forced)];
    }
    if (!tuned) {
      picked = attention_tunes_by_stand_in(s.T) ? tune_by_stand_in(what, s, eligible, region, st, run)
                                                : tune_choice(what, s, eligible, region, st, run);
      tuned = true;
    }
    return picked;
  }

  // A long shape's pick (attention_workspace.h, kAttentionTuneMaxT): the candidates of the stand-in
  // shape {1, kAttentionTuneMaxT, Hq, Hkv, D} are timed on the call's own buffers (each stand-in
  // tensor is smaller than the call's, so a prefix of it; the values do not matter to the timing, and
  // the caller's final run overwrites every output), and the call runs its own candidate with the
  // winner's engine config and graph variant. cuDNN's own pick where there is none, or where the
  // stand-in's plan-ws region would not fit inside the call's (never for the layouts cuDNN 9 gives).
  template <class Run>
  Choice tune_by_stand_in(const char* what, const AttnShape& s, const std::vector<Choice>& eligible, size_t region,
                          cudaStream_t st, Run&& run) {
    const bool backward = what[0] == 'b';
    const AttnShape stand_in{1, kAttentionTuneMaxT, s.Hq, s.Hkv, s.D};
    const Entry* se = cudnn_entry(stand_in);
    const Entry& own = entry(s);
    std::string why;
    if (!se) {
      why = "the stand-in shape is not on the cudnn path";
    } else if ((backward ? se->bwd_region : se->fwd_region) > region) {
      why = "the stand-in's plan workspace exceeds the call's";
    } else if (backward && se->bwd[0]->dq_accum && !own.bwd[0]->dq_accum) {
      why = "the call's workspace has no dQ accumulator for the stand-in's plans";
    }
    if (!why.empty()) {
      if (verbose)
        std::fprintf(stderr, "strata attention %s B=%d T=%d: cuDNN's own plan, untimed (%s)\n", what, s.B, s.T,
                     why.c_str());
      return eligible[0];
    }
    const std::vector<Choice>& stand_in_eligible = backward ? se->bwd_eligible : se->fwd_eligible;
    const Choice best =
        tune_choice(what, stand_in, stand_in_eligible, backward ? se->bwd_region : se->fwd_region, st, run);
    const std::string want = choice_label(best, backward);
    for (const Choice& c : eligible)
      if (choice_label(c, backward) == want) {
        if (verbose)
          std::fprintf(stderr, "strata attention %s B=%d T=%d Hq=%d Hkv=%d D=%d: tuned at T=%d: %s\n", what, s.B, s.T,
                       s.Hq, s.Hkv, s.D, kAttentionTuneMaxT, want.c_str());
        return c;
      }
    if (verbose)
      std::fprintf(stderr,
                   "strata attention %s B=%d T=%d: the stand-in's pick (%s) is not a candidate here; cuDNN's own\n",
                   what, s.B, s.T, want.c_str());
    return eligible[0];
  }

  static std::string choice_label(const Choice& c, bool backward) {
    return c.plan->graph->candidates[c.cand].label + (backward ? variant_label(*c.plan) : "");
  }

  static std::string variant_label(const Plan& p) {
    return fmt::format(" [causal_first={} dq_accum={} k_f32={} modern={}]", p.causal_first, p.dq_accum, p.k_f32,
                       p.modern);
  }
  static constexpr int kTuneReps = kAttentionTuneReps;
  static TunePicks<std::array<int, 6>>& picks() {  // shared by every Attention of the process
    static TunePicks<std::array<int, 6>> p;
    return p;
  }
};

Attention::Attention() : impl_(std::make_unique<Impl>()) {}

Attention::~Attention() {
  if (!impl_) return;
  impl_->cache.clear();  // plans before the handle
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

double Attention::plan_build_seconds() {
  return double(g_build_ns.load()) * 1e-9;
}

double Attention::last_plan_build_seconds() {
  return double(g_last_build_ns.load()) * 1e-9;
}

void Attention::set_force_fallback(bool force) {
  g_force_fallback.store(force);
}

void Attention::set_force_candidate(bool backward, int index) {
  (backward ? g_force_bwd : g_force_fwd).store(index);
}

size_t Attention::candidate_count(const AttnShape& s, bool backward) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return 0;
  return backward ? e->bwd_eligible.size() : e->fwd_eligible.size();
}

const char* Attention::path(const AttnShape& s) const {
  if (g_force_fallback.load()) return "fallback: forced by Attention::set_force_fallback";
  return impl_->entry(s).path.c_str();
}

std::string Attention::plan_label(const AttnShape& s, bool backward) const {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return path(s);
  const int forced = (backward ? g_force_bwd : g_force_fwd).load();
  const std::vector<Impl::Choice>& list = backward ? e->bwd_eligible : e->fwd_eligible;
  const bool use_forced = forced >= 0 && size_t(forced) < list.size();
  const Impl::Choice& c = use_forced ? list[size_t(forced)] : backward ? e->bwd_pick : e->fwd_pick;
  const bool tuned = use_forced || (backward ? e->bwd_tuned : e->fwd_tuned);
  return c.plan->graph->candidates[c.cand].label + (backward ? Impl::variant_label(*c.plan) : "") +
         (tuned ? "" : " (not yet tuned)");
}

size_t Attention::workspace_bytes(const AttnShape& s, bool backward, bool accumulate) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return 0;
  if (!backward) return e->fwd_region;
  const BwdLayout L(s, e->bwd_region, e->bwd[0]->dq_accum);
  return accumulate ? L.total : L.sdq;
}

void Attention::fwd(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s, void* ws,
                    size_t ws_bytes, cudaStream_t st) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return flash_attention_fwd(out, lse, q, k, v, s, st);
  if (ws_bytes < e->fwd_region)
    STRATA_THROW(Error, fmt::format("attention fwd: workspace {} B < {} B needed", ws_bytes, e->fwd_region));
  auto run = [&](const Impl::Choice& c) {
    const Plan& p = *c.plan;
    execute_plan(impl_->handle, p.graph->candidates[c.cand].plan, {kQ, kK, kV, kO, kStats, kScale, kNeg},
                 {cp(q), cp(k), cp(v), out, lse, cp(&p.scale), cp(&p.neg)}, ws, st);
  };
  const Impl::Choice& c =
      impl_->pick("forward", s, e->fwd_eligible, g_force_fwd.load(), e->fwd_pick, e->fwd_tuned, e->fwd_region, st, run);
  try {
    run(c);
  } catch (const Declined& ex) {
    STRATA_THROW(Error, std::string("attention (cudnn): forward execute failed: ") + ex.what());
  }
}

void Attention::bwd(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                    const bf16* out, const float* lse, const AttnShape& s, bool accumulate, void* ws, size_t ws_bytes,
                    cudaStream_t st) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return flash_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, s, accumulate, st);
  const BwdLayout L(s, e->bwd_region, e->bwd[0]->dq_accum);
  const size_t need = accumulate ? L.total : L.sdq;  // the dq/dk/dv scratch only when adding
  if (ws_bytes < need) STRATA_THROW(Error, fmt::format("attention bwd: workspace {} B < {} B needed", ws_bytes, need));
  char* w = static_cast<char*>(ws);
  const size_t nq = size_t(s.B) * s.T * s.Hq * s.D, nkv = size_t(s.B) * s.T * s.Hkv * s.D;
  // cuDNN overwrites its outputs: to accumulate, write to scratch and add.
  bf16* tq = accumulate ? reinterpret_cast<bf16*>(w + L.sdq) : dq;
  bf16* tk = accumulate ? reinterpret_cast<bf16*>(w + L.sdk) : dk;
  bf16* tv = accumulate ? reinterpret_cast<bf16*>(w + L.sdv) : dv;
  auto run = [&](const Impl::Choice& c) {
    const Plan& p = *c.plan;
    std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNeg, kdO, kdQ, kdK, kdV, kOne, kSoftmaxSum};
    std::vector<void*> ptrs{cp(q),    cp(k), cp(v), cp(out), cp(lse),    cp(&p.scale), cp(&p.neg),
                            cp(dout), tq,    tk,    tv,      cp(&p.one), w + L.ssum};
    if (p.dq_accum) {
      // cuDNN < 9.6 needed it zeroed; later ones zero it themselves (1.3 ms a step on the 8B otherwise).
      if (impl_->version < 90600) cudaMemsetAsync(w + L.acc, 0, nq * sizeof(float), st);
      uids.push_back(kdQAccum);
      ptrs.push_back(w + L.acc);
    }
    execute_plan(impl_->handle, p.graph->candidates[c.cand].plan, uids, std::move(ptrs), ws, st);
  };
  const Impl::Choice& c = impl_->pick("backward", s, e->bwd_eligible, g_force_bwd.load(), e->bwd_pick, e->bwd_tuned,
                                      e->bwd_region, st, run);
  try {
    run(c);
  } catch (const Declined& ex) {
    STRATA_THROW(Error, std::string("attention (cudnn): backward execute failed: ") + ex.what());
  }
  if (accumulate) {
    add_bf16_inplace(dq, tq, nq, st);
    add_bf16_inplace(dk, tk, nkv, st);
    add_bf16_inplace(dv, tv, nkv, st);
  }
}

}  // namespace strata::cuda
