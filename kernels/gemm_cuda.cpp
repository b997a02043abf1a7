// cuBLASLt wrapper. cuBLASLt is column-major, so a row-major C[m, n] = A @ B is computed as the
// column-major C^T = B^T @ A^T: every call below swaps the operands and reads row-major buffers
// as their column-major transposes (same bytes, no copies).
#include "kernels/gemm_cuda.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "kernels/tune_costs.h"
#include "kernels/tune_picks.h"

namespace strata::cuda {
namespace {

void check(cublasStatus_t st, const char* what, const char* file, int line) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuBLASLt: {} failed: {} ({}) [{}]", what, cublasLtGetStatusName(st),
                            cublasLtGetStatusString(st), detail::where(file, line)));
}
#define LT_CHECK(x) check((x), #x, __FILE__, __LINE__)

// Largest power of two (<= 256) dividing the address: what the heuristic may assume.
int alignment(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && (a % al) != 0) al /= 2;
  return al;
}

// One column-major problem: D[m, n] = alpha op(A) op(B) + beta C, C == D.
// FP8 (ab_type an 8-bit float): B's type may differ (E4M3 by E5M2), fast_accum skips the periodic promotion of the
// tensor cores' partial sums to fp32 (the forward's choice, as Transformer Engine's), and the scale pointers are set
// per call.
struct Problem {
  bool ta, tb;
  int m, n, k;
  int lda, ldb, ldc;
  cudaDataType_t ab_type, c_type;
  int align_a, align_b, align_c;
  cudaDataType_t b_type = CUDA_R_16BF;
  bool fast_accum = false;
  std::array<int64_t, 15> key() const {
    return {ta,
            tb,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            int64_t(ab_type),
            int64_t(c_type),
            align_a,
            align_b,
            align_c,
            int64_t(b_type),
            fast_accum};
  }
  bool fp8() const { return ab_type == CUDA_R_8F_E4M3 || ab_type == CUDA_R_8F_E5M2; }
};

struct Entry {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};              // the one in use
  std::vector<cublasLtMatmulAlgo_t> algos;  // heuristic's candidates, best-ranked first
  bool tuned = false;                       // algo was timed against the others
  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {  // destructors never throw: statuses ignored
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  std::map<std::array<int64_t, 15>, Entry> cache;

  // FP8: the scale pointers are set before the heuristic runs (it may pick a kernel that takes no scales
  // otherwise); the call's own are set again at every run.
  Entry& entry(const Problem& p, const float* a_scale, const float* b_scale) {
    auto key = p.key();
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Entry& e = cache[key];
    try {
      LT_CHECK(cublasLtMatmulDescCreate(&e.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      cublasOperation_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
      LT_CHECK(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      LT_CHECK(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      // Stored (pre-op) shapes: op(A) is m x k, op(B) is k x n.
      LT_CHECK(cublasLtMatrixLayoutCreate(&e.a, p.ab_type, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda));
      LT_CHECK(
          cublasLtMatrixLayoutCreate(&e.b, p.fp8() ? p.b_type : p.ab_type, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb));
      if (p.fp8()) {
        const int8_t fast = p.fast_accum ? 1 : 0;
        LT_CHECK(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
        set_scales(e, a_scale, b_scale);
      }
      LT_CHECK(cublasLtMatrixLayoutCreate(&e.c, p.c_type, p.m, p.n, p.ldc));

      cublasLtMatmulPreference_t pref = nullptr;
      LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      uint64_t wsb = ws_bytes;
      uint32_t al_a = p.align_a, al_b = p.align_b, al_c = p.align_c;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c));
      if (p.c_type == CUDA_R_16BF) {
        // A split-K algorithm may sum its partial products in D's type (in place or in a bf16 workspace),
        // rounding to bf16 once per split: only fp32 (compute-type) reductions, so D is rounded once
        // (bf16 gradients accumulate into D: tests/gpu/grads_bf16_gpu_test.cpp).
        uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
      }
      std::array<cublasLtMatmulHeuristicResult_t, kTuneCandidates> res{};
      int found = 0;
      cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, e.op, e.a, e.b, e.c, e.c, pref,
                                                         tune ? int(res.size()) : 1, res.data(), &found);
      cublasLtMatmulPreferenceDestroy(pref);
      for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws_bytes) e.algos.push_back(res[i].algo);
      if (st != CUBLAS_STATUS_SUCCESS || e.algos.empty())
        throw UnsupportedError(fmt::format(
            "cuBLASLt: no algorithm for m={} n={} k={} ta={} tb={} lda={} ldb={} ldc={} align={}/{}/{} ({}) [{}]", p.m,
            p.n, p.k, p.ta, p.tb, p.lda, p.ldb, p.ldc, p.align_a, p.align_b, p.align_c, cublasLtGetStatusName(st),
            detail::where(__FILE__, __LINE__)));
      e.algo = e.algos[0];
      e.tuned = e.algos.size() < 2;
      if (int i = picks().get(key); i >= 0 && i < int(e.algos.size())) {  // tuned earlier in this process
        e.algo = e.algos[i];
        e.tuned = true;
      }
    } catch (...) {
      cache.erase(key);
      throw;
    }
    return e;
  }

  // Device pointers to the FP8 operands' dequantising factors, read when the GEMM runs.
  static void set_scales(Entry& e, const float* a_scale, const float* b_scale) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(e.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
  }

  void run(const Problem& p, const void* A, const void* B, void* C, float beta, cudaStream_t s,
           const float* a_scale = nullptr, const float* b_scale = nullptr) {
    if (p.m == 0 || p.n == 0) return;
    Entry& e = entry(p, a_scale, b_scale);
    if (p.fp8()) set_scales(e, a_scale, b_scale);
    // Tuning reruns the GEMM, so only where C is overwritten (beta 0); an accumulating first call
    // uses the heuristic's pick and the problem is tuned at its first overwriting call.
    if (!e.tuned && beta == 0.0f) tune_entry(p, e, A, B, C, s);
    const float alpha = 1.0f;
    LT_CHECK(cublasLtMatmul(handle, e.op, &alpha, A, e.a, B, e.b, &beta, C, e.c, C, e.c, &e.algo, ws, ws_bytes, s));
  }

  // Times each candidate algorithm on the call's own operands and keeps the fastest; one that
  // fails to launch is skipped. Default: one warm-up and kTuneReps timed runs each, back to back.
  // STRATA_GEMM_TUNE_MS=X (sustained): kTuneRounds round-robin rounds, each candidate run for about
  // X / kTuneRounds ms a round, so every candidate is timed over the same stretch of clocks and
  // power (long enough to reach the board's power cap, where a training step runs).
  void tune_entry(const Problem& p, Entry& e, const void* A, const void* B, void* C, cudaStream_t s) {
    e.tuned = true;
    cudaEvent_t t0 = nullptr, t1 = nullptr;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    const float alpha = 1.0f, beta = 0.0f;
    const size_t n = e.algos.size();
    auto launch = [&](size_t i) {
      return cublasLtMatmul(handle, e.op, &alpha, A, e.a, B, e.b, &beta, C, e.c, C, e.c, &e.algos[i], ws, ws_bytes,
                            s) == CUBLAS_STATUS_SUCCESS;
    };
    auto timed = [&](size_t i, int reps) {  // ms a run; FLT_MAX when a launch fails
      float ms = FLT_MAX;
      cudaEventRecord(t0, s);
      bool ok = true;
      for (int r = 0; r < reps && ok; r++) ok = launch(i);
      cudaEventRecord(t1, s);
      cudaEventSynchronize(t1);
      if (ok && cudaEventElapsedTime(&ms, t0, t1) == cudaSuccess) ms /= float(reps);
      return ok ? ms : FLT_MAX;
    };
    std::vector<double> total(n, 0.0);
    std::vector<int> runs(n, 0), reps(n, kTuneReps);
    std::vector<bool> dead(n, false);
    for (size_t i = 0; i < n; i++) {
      dead[i] = !launch(i);  // warm-up
      if (!dead[i] && sustained_ms > 0) {
        const float one = timed(i, 1);
        dead[i] = one == FLT_MAX;
        const double per_round = sustained_ms / kTuneRounds;
        if (!dead[i]) reps[i] = std::max(kTuneReps, int(std::ceil(per_round / std::max(one, 1e-3f))));
      }
    }
    const int rounds = sustained_ms > 0 ? kTuneRounds : 1;
    for (int r = 0; r < rounds; r++)
      for (size_t i = 0; i < n; i++) {
        if (dead[i]) continue;
        const float ms = timed(i, reps[i]);
        if (ms == FLT_MAX) {
          dead[i] = true;
          continue;
        }
        total[i] += double(ms) * reps[i];
        runs[i] += reps[i];
      }
    float best = FLT_MAX;
    int best_i = 0;
    std::string log;
    for (size_t i = 0; i < n; i++) {
      const float ms = dead[i] ? FLT_MAX : float(total[i] / runs[i]);
      if (verbose) log += fmt::format(" {:.3f}", ms == FLT_MAX ? -1.0f : ms);
      // A later-ranked algorithm must win by kTuneMargin: timing noise should not flip the pick.
      if (ms < best * (best == FLT_MAX ? 1.0f : 1.0f - kTuneMargin)) {
        best = ms;
        best_i = int(i);
        e.algo = e.algos[i];
      }
    }
    picks().put(p.key(), best_i);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    if (verbose)
      std::fprintf(stderr, "strata gemm m=%d n=%d k=%d ta=%d tb=%d: %zu algorithms, ms:%s -> %d%s\n", p.m, p.n, p.k,
                   int(p.ta), int(p.tb), n, log.c_str(), best_i, sustained_ms > 0 ? " (sustained)" : "");
  }

  static constexpr int kTuneCandidates = kGemmTuneCandidates, kTuneReps = kGemmTuneReps, kTuneRounds = 3;
  using Key = std::array<int64_t, 15>;
  static TunePicks<Key>& picks() {  // shared by every Gemm of the process
    static TunePicks<Key> p;
    return p;
  }
  const bool tune = switches().gemm_tune;
  const bool verbose = switches().gemm_verbose;
  const double sustained_ms = switches().gemm_tune_ms;
};

Gemm::Gemm(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  STRATA_CHECK(workspace != nullptr || workspace_bytes == 0, "Gemm: null workspace with a non-zero size");
  impl_->ws = workspace;
  impl_->ws_bytes = workspace_bytes;
  LT_CHECK(cublasLtCreate(&impl_->handle));
}

Gemm::~Gemm() {
  if (impl_) {
    impl_->cache.clear();
    if (impl_->handle) cublasLtDestroy(impl_->handle);
  }
}

namespace {
void check_dims(int N, int I, int O, const char* what) {
  if (N < 0 || I < 0 || O < 0) throw Error(fmt::format("{}: negative shape N={} I={} O={}", what, N, I, O));
}
}  // namespace

// y^T[O, N] = w^T'[O, I] x^T[I, N]: w (col-major [I, O], ld I) transposed, x (col-major [I, N]) as is.
void Gemm::linear_fwd(bf16* y, const bf16* x, const bf16* w, int N, int I, int O, cudaStream_t s) {
  check_dims(N, I, O, "linear_fwd");
  if (I == 0) {  // empty contraction: y = 0 (cuBLASLt rejects k = 0)
    if (N > 0 && O > 0) cudaMemsetAsync(y, 0, size_t(N) * O * sizeof(bf16), s);
    return;
  }
  Problem p{true, false, O, N, I, I, I, O, CUDA_R_16BF, CUDA_R_16BF, alignment(w), alignment(x), alignment(y)};
  impl_->run(p, w, x, y, 0.0f, s);
}

// dx^T[I, N] = w^T[I, O] dy^T[O, N]: both read as stored.
void Gemm::linear_bwd_dx(bf16* dx, const bf16* dy, const bf16* w, int N, int I, int O, bool accumulate,
                         cudaStream_t s) {
  check_dims(N, I, O, "linear_bwd_dx");
  if (O == 0) {
    if (!accumulate && N > 0 && I > 0) cudaMemsetAsync(dx, 0, size_t(N) * I * sizeof(bf16), s);
    return;
  }
  Problem p{false, false, I, N, O, I, O, I, CUDA_R_16BF, CUDA_R_16BF, alignment(w), alignment(dy), alignment(dx)};
  impl_->run(p, w, dy, dx, accumulate ? 1.0f : 0.0f, s);
}

// dw^T[I, O] (+)= x^T[I, N] dy[N, O]: x read as stored, dy (col-major [O, N], ld O) transposed.
void Gemm::linear_bwd_dw(float* dw, const bf16* dy, const bf16* x, int N, int I, int O, bool accumulate,
                         cudaStream_t s) {
  check_dims(N, I, O, "linear_bwd_dw");
  if (N == 0) {
    if (!accumulate && I > 0 && O > 0) cudaMemsetAsync(dw, 0, size_t(O) * I * sizeof(float), s);
    return;
  }
  Problem p{false, true, I, O, N, I, O, I, CUDA_R_16BF, CUDA_R_32F, alignment(x), alignment(dy), alignment(dw)};
  impl_->run(p, x, dy, dw, accumulate ? 1.0f : 0.0f, s);
}

// The same GEMM with a bf16 C/D: cuBLASLt accumulates in fp32; adding (beta 1) it may round the product
// to bf16 before adding C (tests/gpu/grads_bf16_gpu_test.cpp).
void Gemm::linear_bwd_dw(bf16* dw, const bf16* dy, const bf16* x, int N, int I, int O, bool accumulate,
                         cudaStream_t s) {
  check_dims(N, I, O, "linear_bwd_dw");
  if (N == 0) {
    if (!accumulate && I > 0 && O > 0) cudaMemsetAsync(dw, 0, size_t(O) * I * sizeof(bf16), s);
    return;
  }
  Problem p{false, true, I, O, N, I, O, I, CUDA_R_16BF, CUDA_R_16BF, alignment(x), alignment(dy), alignment(dw)};
  impl_->run(p, x, dy, dw, accumulate ? 1.0f : 0.0f, s);
}

// D^T[N, M] = B'[N, K] A^T[K, M] (column-major): B (col-major [K, N], ld K) transposed, A (col-major [K, M]) as is:
// the TN form cuBLASLt's FP8 kernels take.
void Gemm::fp8(void* d, bool d_bf16, const uint8_t* a, bool a_e5m2, const float* a_inv, const uint8_t* b, bool b_e5m2,
               const float* b_inv, int M, int N, int K, bool accumulate, bool fast_accum, cudaStream_t s) {
  check_dims(M, K, N, "fp8 gemm");
  STRATA_CHECK(M % 16 == 0 && N % 16 == 0 && K % 16 == 0,
               fmt::format("fp8 gemm: M={} N={} K={} must be multiples of 16", M, N, K));
  if (K == 0) {
    if (!accumulate && M > 0 && N > 0) cudaMemsetAsync(d, 0, size_t(M) * N * (d_bf16 ? 2 : 4), s);
    return;
  }
  auto type = [](bool e5m2) { return e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; };
  Problem p{true,
            false,
            N,
            M,
            K,
            K,
            K,
            N,
            type(b_e5m2),
            d_bf16 ? CUDA_R_16BF : CUDA_R_32F,
            alignment(b),
            alignment(a),
            alignment(d),
            type(a_e5m2),
            fast_accum};
  impl_->run(p, b, a, d, accumulate ? 1.0f : 0.0f, s, b_inv, a_inv);
}

// logits^T[V, n] = w^T'[V, C] x^T[C, n], fp32 out.
void Gemm::logits_f32(float* logits, const bf16* x, const bf16* w, int n, int C, int V, cudaStream_t s) {
  check_dims(n, C, V, "logits_f32");
  if (C == 0) {
    if (n > 0 && V > 0) cudaMemsetAsync(logits, 0, size_t(n) * V * sizeof(float), s);
    return;
  }
  Problem p{true, false, V, n, C, C, C, V, CUDA_R_16BF, CUDA_R_32F, alignment(w), alignment(x), alignment(logits)};
  impl_->run(p, w, x, logits, 0.0f, s);
}

}  // namespace strata::cuda
