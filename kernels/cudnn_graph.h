// A cuDNN backend-API operation graph with every engine config that finalizes (internal to
// kernels/attention_cudnn_cuda.cpp): descriptors owned and destroyed together, helpers for
// tensors, pointwise, reduction, matmul and reshape ops, and the heuristic's candidate plans.
#pragma once
#include <cudnn.h>
#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::cuda::cudnn_graph {

// cuDNN declined or failed while building a plan: the shape goes to the fallback.
struct Declined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void dnn(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char msg[512] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  throw Declined(fmt::format("{}: {}{}{}", what, cudnnGetErrorString(st), msg[0] ? " - " : "", msg));
}
#define DNN(x) dnn((x), #x)

using Desc = cudnnBackendDescriptor_t;
using Dims = std::array<int64_t, 4>;

// Virtual tensors get uids from here up; real tensors use smaller ones.
constexpr int64_t kFirstVirtualUid = 100;

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

  // Operation graph -> heuristics -> every engine config (up to kMaxCandidates) whose plan
  // finalizes, in heuristic order: mode A, and the fallback mode only when mode A gives none.
  // candidates[0] is what cuDNN's heuristic picks; Attention may time the rest and pick the fastest.
  void finalize_plans() {
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
      for (int64_t i = 0; i < got && candidates.size() < kMaxCandidates; i++) {
        Desc p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h_);
        set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
        cudnnStatus_t st = cudnnBackendFinalize(p);
        if (st == CUDNN_STATUS_SUCCESS) {
          int64_t cnt = 0, ws = 0;
          DNN(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &ws));
          candidates.push_back({p, ws, describe(cfgs[i])});
          continue;
        }
        char msg[256] = {0};
        cudnnGetLastErrorString(msg, sizeof msg);
        tried += fmt::format(" [cfg {}: {} {}]", i, cudnnGetErrorString(st), msg);
      }
      if (!candidates.empty()) return;
    }
    throw Declined("no engine config finalizes for this graph" + (tried.empty() ? " (no configs)" : tried));
  }

  // "engine E k24=V ..." for an engine config: its global index and knob choices (for logs).
  std::string describe(Desc cfg) {
    std::string out = "engine ?";
    Desc eng = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t cnt = 0, idx = -1;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx) ==
            CUDNN_STATUS_SUCCESS)
      out = fmt::format("engine {}", idx);
    std::vector<Desc> knobs(16);
    for (auto& k : knobs) k = make(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    int64_t nk = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 int64_t(knobs.size()), &nk, knobs.data()) != CUDNN_STATUS_SUCCESS)
      return out;
    for (int64_t i = 0; i < nk && i < int64_t(knobs.size()); i++) {
      cudnnBackendKnobType_t type{};
      int64_t value = 0;
      if (cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &type) ==
              CUDNN_STATUS_SUCCESS &&
          cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &value) ==
              CUDNN_STATUS_SUCCESS)
        out += fmt::format(" k{}={}", int(type), value);
    }
    return out;
  }

  struct Candidate {
    Desc plan;
    int64_t ws;
    std::string label;
  };
  static constexpr size_t kMaxCandidates = 8;
  std::vector<Candidate> candidates;

 private:
  void add_op(Desc op) {
    DNN(cudnnBackendFinalize(op));
    ops_.push_back(op);
  }
  cudnnHandle_t h_;
  std::vector<Desc> owned_, ops_;
  int64_t next_uid_ = kFirstVirtualUid;
};

}  // namespace strata::cuda::cudnn_graph
