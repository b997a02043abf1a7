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

#include <array>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/error.h"
#include "kernels/attention_cuda.h"

namespace strata::cuda {
namespace {

std::atomic<bool> g_force_fallback{false};

// cuDNN declined or failed while building a plan: the shape goes to the fallback.
struct Declined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void dnn(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char msg[512] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  throw Declined(fmt::format("{}: {}{}{}", what, cudnnGetErrorString(st), msg[0] ? " - " : "", msg));
}
#define DNN(x) dnn((x), #x)

using Desc = cudnnBackendDescriptor_t;
using Dims = std::array<int64_t, 4>;

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
  kFirstVirtual = 100
};

// Owns every descriptor of one graph (tensors, ops, heuristics, configs, the plan).
class Graph {
 public:
  explicit Graph(cudnnHandle_t h) : h_(h) {}
  ~Graph() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Desc make(cudnnBackendDescriptorType_t t) {
    Desc d = nullptr;
    DNN(cudnnBackendCreateDescriptor(t, &d));
    owned_.push_back(d);
    return d;
  }
  static void set(Desc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void* v) {
    DNN(cudnnBackendSetAttribute(d, a, t, n, v));
  }
  static void set_desc(Desc d, cudnnBackendAttributeName_t a, Desc v) {
    set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }

  Desc tensor(int64_t uid, cudnnDataType_t dt, Dims dim, Dims stride, bool is_virtual = false, bool by_value = false) {
    Desc t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride.data());
    bool v = is_virtual, bv = by_value;
    if (is_virtual) set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &bv);
    DNN(cudnnBackendFinalize(t));
    return t;
  }
  Desc virt(cudnnDataType_t dt, Dims dim, Dims stride) { return tensor(next_uid_++, dt, dim, stride, true); }
  Desc scalar(int64_t uid) { return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  // y = mode(x[, b][, t]) computed in `prec`; axis only for GEN_INDEX.
  void pw(cudnnPointwiseMode_t mode, Desc x, Desc b, Desc t, Desc y, cudnnDataType_t prec = CUDNN_DATA_FLOAT,
          int64_t axis = -1) {
    Desc p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    DNN(cudnnBackendFinalize(p));
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    add_op(op);
  }
  void reduce(cudnnReduceTensorOp_t mode, Desc x, Desc y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    DNN(cudnnBackendFinalize(r));
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    add_op(op);
  }
  void matmul(Desc a, Desc b, Desc c) {
    Desc m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f);
    DNN(cudnnBackendFinalize(m));
    Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m);
    add_op(op);
  }
  void reshape(Desc x, Desc y) {
    Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    add_op(op);
  }

  // Operation graph -> heuristics -> the first engine config whose plan finalizes.
  void finalize_plan() {
    Desc og = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()), ops_.data());
    set(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_);
    DNN(cudnnBackendFinalize(og));
    std::string tried;
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
      set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
      set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
      if (cudnnStatus_t st = cudnnBackendFinalize(heur); st != CUDNN_STATUS_SUCCESS) {
        char msg[256] = {0};
        cudnnGetLastErrorString(msg, sizeof msg);
        tried += fmt::format(" [heuristic mode {}: {} {}]", int(mode), cudnnGetErrorString(st), msg);
        continue;
      }
      int64_t n = 0;
      if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                   nullptr) != CUDNN_STATUS_SUCCESS ||
          n <= 0) {
        tried += fmt::format(" [heuristic mode {}: no engine configs]", int(mode));
        continue;
      }
      std::vector<Desc> cfgs(n);
      for (auto& c : cfgs) c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      int64_t got = 0;
      DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                   cfgs.data()));
      for (int64_t i = 0; i < got; i++) {
        Desc p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_);
        set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
        cudnnStatus_t st = cudnnBackendFinalize(p);
        if (st == CUDNN_STATUS_SUCCESS) {
          int64_t cnt = 0;
          DNN(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                                       &plan_ws));
          plan = p;
          return;
        }
        char msg[256] = {0};
        cudnnGetLastErrorString(msg, sizeof msg);
        tried += fmt::format(" [cfg {}: {} {}]", i, cudnnGetErrorString(st), msg);
      }
    }
    throw Declined("no engine config finalizes for this graph" + (tried.empty() ? " (no configs)" : tried));
  }

  Desc plan = nullptr;
  int64_t plan_ws = 0;

 private:
  void add_op(Desc op) {
    DNN(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }
  cudnnHandle_t h_;
  std::vector<Desc> owned_, ops_;
  int64_t next_uid_ = kFirstVirtual;
};

struct Plan {
  std::unique_ptr<Graph> graph;
  bool dq_accum = false;                           // backward: fp32 dQ accumulator in ws
  float scale = 1.0f, neg = -FLT_MAX, one = 1.0f;  // by-value scalars read at execute
};

// Dims/strides of the logical [b, h, s, d] view of BSHD memory.
Dims bshd_stride(int64_t h, int64_t s, int64_t d) {
  return {s * h * d, d, h * d, 1};
}

// s where row >= col else -FLT_MAX (what cudnn-frontend's causal mask lowers to).
Desc causal(Graph& g, Desc x, Desc neg, Dims ss, Dims ss_st) {
  Desc row = g.virt(CUDNN_DATA_INT32, ss, ss_st), col = g.virt(CUDNN_DATA_INT32, ss, ss_st);
  g.pw(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, CUDNN_DATA_INT32, 2);
  g.pw(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, CUDNN_DATA_INT32, 3);
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
  g.finalize_plan();
  plan->scale = 1.0f / std::sqrt(float(s.D));
  return plan;
}

// causal_first: mask before subtracting the stats (frontend <= 1.7) or after (later frontends).
// dq_accum: dQ through an fp32 accumulator in workspace (frontend default on cuDNN 9) or direct.
std::unique_ptr<Plan> build_bwd(cudnnHandle_t h, const AttnShape& s, bool causal_first, bool dq_accum) {
  auto plan = std::make_unique<Plan>();
  plan->graph = std::make_unique<Graph>(h);
  plan->dq_accum = dq_accum;
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
  if (causal_first) s1 = causal(g, s1, neg, ss, ss_st);
  Desc s2 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.pw(CUDNN_POINTWISE_SUB, s1, stats, nullptr, s2);
  if (!causal_first) s2 = causal(g, s2, neg, ss, ss_st);
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
  Desc dp = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), dp1 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  Desc dp2 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st), ds0 = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  Desc ds = g.virt(CUDNN_DATA_FLOAT, ss, ss_st);
  g.matmul(dO, VT, dp);
  g.pw(CUDNN_POINTWISE_MUL, dp, one, nullptr, dp1);
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
  Desc k = g.virt(CUDNN_DATA_BFLOAT16, {b, hk, t, d}, bshd_stride(hk, t, d));
  g.reshape(KT, k);
  if (dq_accum) {
    Desc acc = g.tensor(kdQAccum, CUDNN_DATA_FLOAT, full, full_st);
    g.matmul(ds, k, acc);
    g.pw(CUDNN_POINTWISE_IDENTITY, acc, nullptr, nullptr, dQ);
  } else {
    g.matmul(ds, k, dQ);
  }
  g.finalize_plan();
  plan->scale = 1.0f / std::sqrt(float(s.D));
  return plan;
}

size_t align256(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Backward workspace: [plan ws][softmax_sum][dQ accumulator][dq, dk, dv scratch for accumulate].
struct BwdLayout {
  size_t ssum, acc, sdq, sdk, sdv, total;
  BwdLayout(const AttnShape& s, const Plan& p) {
    const size_t rows = size_t(s.B) * s.Hq * s.T;
    const size_t nq = rows * s.D, nkv = size_t(s.B) * s.Hkv * s.T * s.D;
    ssum = align256(size_t(p.graph->plan_ws));
    acc = ssum + align256(rows * sizeof(float));
    sdq = acc + (p.dq_accum ? align256(nq * sizeof(float)) : 0);
    sdk = sdq + align256(nq * sizeof(bf16));
    sdv = sdk + align256(nkv * sizeof(bf16));
    total = sdv + align256(nkv * sizeof(bf16));
  }
};

void execute(cudnnHandle_t h, const Plan& p, std::vector<int64_t> uids, std::vector<void*> ptrs, void* ws,
             cudaStream_t st) {
  DNN(cudnnSetStream(h, st));
  Desc vp = nullptr;
  DNN(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
  try {
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    Graph::set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    DNN(cudnnBackendFinalize(vp));
    DNN(cudnnBackendExecute(h, p.graph->plan, vp));
  } catch (const Declined& e) {
    cudnnBackendDestroyDescriptor(vp);
    STRATA_THROW(Error, std::string("attention (cudnn): execute failed: ") + e.what());
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
  struct Entry {
    std::unique_ptr<Plan> fwd, bwd;
    std::string path;
  };
  std::map<std::array<int, 5>, Entry> cache;

  bool init() {
    if (!tried) {
      tried = true;
      const size_t v = cudnnGetVersion();
      if (v < 90000) {
        unavailable = fmt::format("cuDNN runtime {} is older than 9.0", v);
      } else if (cudnnStatus_t st = cudnnCreate(&handle); st != CUDNN_STATUS_SUCCESS) {
        unavailable = fmt::format("cudnnCreate failed: {}", cudnnGetErrorString(st));
        handle = nullptr;
      }
    }
    return handle != nullptr;
  }

  Entry& entry(const AttnShape& s) {
    std::array<int, 5> key{s.B, s.T, s.Hq, s.Hkv, s.D};
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Entry& e = cache[key];
    if (!init()) {
      e.path = "fallback: " + unavailable;
    } else if (s.D % 8 != 0 || s.D > 256) {
      e.path = fmt::format("fallback: cuDNN needs head dim % 8 == 0 and <= 256 (D = {})", s.D);
    } else {
      try {
        e.fwd = build_fwd(handle, s);
      } catch (const Declined& ex) {
        e.path = std::string("fallback: cuDNN declined forward: ") + ex.what();
      }
      if (e.fwd) {
        std::string why;
        constexpr std::array<std::array<bool, 2>, 3> variants{{{true, true}, {false, true}, {true, false}}};
        for (auto [causal_first, dq_accum] : variants) {
          try {
            e.bwd = build_bwd(handle, s, causal_first, dq_accum);
            break;
          } catch (const Declined& ex) {
            why += fmt::format(" [causal_first={} dq_accum={}: {}]", causal_first, dq_accum, ex.what());
          }
        }
        if (!e.bwd) {
          e.fwd.reset();
          e.path = "fallback: cuDNN declined backward:" + why;
        }
      }
      if (e.fwd && e.bwd) e.path = "cudnn";
    }
    return e;
  }

  Entry* cudnn_entry(const AttnShape& s) {
    if (g_force_fallback.load()) return nullptr;
    Entry& e = entry(s);
    return e.fwd ? &e : nullptr;
  }
};

Attention::Attention() : impl_(std::make_unique<Impl>()) {}

Attention::~Attention() {
  if (!impl_) return;
  impl_->cache.clear();  // plans before the handle
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

void Attention::set_force_fallback(bool force) {
  g_force_fallback.store(force);
}

const char* Attention::path(const AttnShape& s) const {
  if (g_force_fallback.load()) return "fallback: forced by Attention::set_force_fallback";
  return impl_->entry(s).path.c_str();
}

size_t Attention::workspace_bytes(const AttnShape& s, bool backward) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return 0;
  return backward ? BwdLayout(s, *e->bwd).total : size_t(e->fwd->graph->plan_ws);
}

void Attention::fwd(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttnShape& s, void* ws,
                    size_t ws_bytes, cudaStream_t st) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return flash_attention_fwd(out, lse, q, k, v, s, st);
  const Plan& p = *e->fwd;
  if (ws_bytes < size_t(p.graph->plan_ws))
    STRATA_THROW(Error, fmt::format("attention fwd: workspace {} B < {} B needed", ws_bytes, p.graph->plan_ws));
  execute(impl_->handle, p, {kQ, kK, kV, kO, kStats, kScale, kNeg},
          {cp(q), cp(k), cp(v), out, lse, cp(&p.scale), cp(&p.neg)}, ws, st);
}

void Attention::bwd(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                    const bf16* out, const float* lse, const AttnShape& s, bool accumulate, void* ws, size_t ws_bytes,
                    cudaStream_t st) {
  Impl::Entry* e = impl_->cudnn_entry(s);
  if (!e) return flash_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, s, accumulate, st);
  const Plan& p = *e->bwd;
  const BwdLayout L(s, p);
  if (ws_bytes < L.total)
    STRATA_THROW(Error, fmt::format("attention bwd: workspace {} B < {} B needed", ws_bytes, L.total));
  char* w = static_cast<char*>(ws);
  const size_t nq = size_t(s.B) * s.T * s.Hq * s.D, nkv = size_t(s.B) * s.T * s.Hkv * s.D;
  // cuDNN overwrites its outputs: to accumulate, write to scratch and add.
  bf16* tq = accumulate ? reinterpret_cast<bf16*>(w + L.sdq) : dq;
  bf16* tk = accumulate ? reinterpret_cast<bf16*>(w + L.sdk) : dk;
  bf16* tv = accumulate ? reinterpret_cast<bf16*>(w + L.sdv) : dv;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale, kNeg, kdO, kdQ, kdK, kdV, kOne, kSoftmaxSum};
  std::vector<void*> ptrs{cp(q),    cp(k), cp(v), cp(out), cp(lse),    cp(&p.scale), cp(&p.neg),
                          cp(dout), tq,    tk,    tv,      cp(&p.one), w + L.ssum};
  if (p.dq_accum) {
    cudaMemsetAsync(w + L.acc, 0, nq * sizeof(float), st);  // cuDNN < 9.6 needed it zeroed; cheap insurance
    uids.push_back(kdQAccum);
    ptrs.push_back(w + L.acc);
  }
  execute(impl_->handle, p, std::move(uids), std::move(ptrs), ws, st);
  if (accumulate) {
    add_bf16_inplace(dq, tq, nq, st);
    add_bf16_inplace(dk, tk, nkv, st);
    add_bf16_inplace(dv, tv, nkv, st);
  }
}

}  // namespace strata::cuda
