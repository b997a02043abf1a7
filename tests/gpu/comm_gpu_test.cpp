// The nccl communicator on >= 2 GPUs: the test re-executes itself as one rank per GPU (run_local_ranks,
// the --gpus launcher), and each rank runs every collective through NCCL on GPU buffers and through
// the cpu communicator (processes mode, over the same rendezvous) on the same inputs, and compares.
// Fewer than 2 GPUs, or a build without NCCL: every case skips, saying why.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "engine/comm.h"
#include "engine/rendezvous.h"
#include "model/run/launch.h"
#include "nccl_ranks.h"
#ifdef STRATA_HAVE_NCCL
#include <cuda_runtime.h>

#include "engine/backend_cuda.h"
#include "kernels/comm_nccl.h"
#endif

using namespace strata;

namespace {

int gpu_count() {
  return gpu_test::nccl_gpu_count();
}

bool is_child() {
  return gpu_test::is_rank_child("STRATA_COMM_GPU_CHILD");
}

// Starts one rank per GPU (at most 4) running `filter` in this binary; true when all passed.
int run_children(const char* filter) {
  return gpu_test::run_child_ranks("comm_gpu_test", std::min(gpu_count(), 4), filter, "STRATA_COMM_GPU_CHILD");
}

#define SKIP_UNLESS_TWO_GPUS()                                                                      \
  do {                                                                                              \
    const int n = gpu_count();                                                                      \
    if (n < 2)                                                                                      \
      GTEST_SKIP() << "needs >= 2 GPUs and a build with NCCL; this host has " << n                  \
                   << " visible GPU(s) (NCCL built: " << (STRATA_NCCL_BUILT ? "yes" : "no") << ")"; \
  } while (0)
#ifdef STRATA_HAVE_NCCL
constexpr bool STRATA_NCCL_BUILT = true;
#else
constexpr bool STRATA_NCCL_BUILT = false;
#endif

[[maybe_unused]] float value(int rank, int64_t i, int seed) {
  uint32_t s = uint32_t(i * 2654435761u + uint32_t(rank) * 40503u + uint32_t(seed) * 977u);
  s ^= s >> 13, s *= 0x5bd1e995u, s ^= s >> 15;
  return (float(s & 0xffff) / 65536.0f - 0.5f) * 4.0f;
}

}  // namespace

// --- what the parent runs.
TEST(CommGpu, EveryCollectiveMatchesTheCpuCommunicator) {
  if (is_child()) GTEST_SKIP() << "child rank: runs CommGpuChild.*";
  SKIP_UNLESS_TWO_GPUS();
  EXPECT_EQ(run_children("CommGpuChild.Collectives"), 0);
}

TEST(CommGpu, APeerThatStopsCallingIsAnErrorWithinTheTimeout) {
  if (is_child()) GTEST_SKIP() << "child rank: runs CommGpuChild.*";
  SKIP_UNLESS_TWO_GPUS();
  EXPECT_EQ(run_children("CommGpuChild.Timeout"), 0);
}

// --- what each rank runs (skipped unless started by the tests above).
#ifdef STRATA_HAVE_NCCL
namespace {

struct Rank {
  LaunchEnv env = read_launch_env();
  std::unique_ptr<Rendezvous> rdv;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Communicator> nccl, cpu;
  explicit Rank(double timeout_s) {
    env.timeout_s = 60;
    rdv = Rendezvous::join(env.rendezvous());
    EXPECT_EQ(cudaSetDevice(env.local_rank), cudaSuccess);
    be = make_cuda_backend(size_t(2) << 30);
    nccl = make_nccl_communicator(*rdv, NcclOptions{env.local_rank, nullptr, timeout_s});
    cpu = make_cpu_communicator(*rdv);
  }
};

// Runs `op` through NCCL on device buffers and through the cpu communicator on host copies of the
// same inputs; compares (f32: 1e-5 relative to the sum of magnitudes; bf16: NCCL rounds each hop, so
// N bf16 ulps of that sum).
void compare(Rank& k, Collective op, DType dt, int64_t chunk, int seed) {
  const int w = k.nccl->world(), r = k.nccl->rank();
  const int root = w - 1;
  const bool chunked_in = op == Collective::reduce_scatter || op == Collective::all_to_all;
  const int64_t n_in = chunked_in ? chunk * w : chunk;
  const int64_t n_out = op == Collective::all_gather ? chunk * w : op == Collective::reduce_scatter ? chunk : n_in;
  std::vector<float> in_f(static_cast<size_t>(n_in));
  for (int64_t i = 0; i < n_in; ++i) in_f[size_t(i)] = value(r, i, seed);
  // The host reference in dt (the device rounds its upload the same way).
  std::vector<std::byte> in_h(size_t(n_in) * dtype_size(dt)), out_h(size_t(n_out) * dtype_size(dt));
  convert_from_f32(in_h.data(), dt, in_f.data(), size_t(n_in));
  Buffer in_d(k.be->arena(), dt, Shape{n_in}, "comm.in"), out_d(k.be->arena(), dt, Shape{n_out}, "comm.out");
  k.be->upload_f32(in_d.view(), in_f.data());
  k.be->synchronize();
  Tensor in_t(in_h.data(), dt, Shape{n_in}), out_t(out_h.data(), dt, Shape{n_out});
  CommTicket t = 0;
  switch (op) {
    case Collective::all_reduce:
      t = k.nccl->all_reduce(in_d.view()), k.cpu->all_reduce(in_t);
      break;
    case Collective::broadcast:
      t = k.nccl->broadcast(in_d.view(), root), k.cpu->broadcast(in_t, root);
      break;
    case Collective::reduce:
      t = k.nccl->reduce(in_d.view(), root), k.cpu->reduce(in_t, root);
      break;
    case Collective::reduce_scatter:
      t = k.nccl->reduce_scatter(out_d.view(), in_d.view()), k.cpu->reduce_scatter(out_t, in_t);
      break;
    case Collective::all_gather:
      t = k.nccl->all_gather(out_d.view(), in_d.view()), k.cpu->all_gather(out_t, in_t);
      break;
    case Collective::all_to_all:
      t = k.nccl->all_to_all(out_d.view(), in_d.view()), k.cpu->all_to_all(out_t, in_t);
      break;
    default:
      break;
  }
  k.nccl->wait_host(t);
  const bool in_place = op == Collective::all_reduce || op == Collective::broadcast || op == Collective::reduce;
  const Tensor got_d = in_place ? in_d.view() : out_d.view();
  const std::vector<std::byte>& want_h = in_place ? in_h : out_h;
  std::vector<float> got(size_t(got_d.numel())), want(size_t(got_d.numel()));
  k.be->download_f32(got.data(), got_d);
  convert_to_f32(want.data(), want_h.data(), dt, want.size());
  // A reduce's non-roots keep their input: exact.
  const bool sums =
      op == Collective::all_reduce || op == Collective::reduce_scatter || (op == Collective::reduce && r == root);
  const double ulp = dt == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -23);
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = sums ? 2.0 * w * ulp * 2.0 * w : 0.0;  // |x| < 2: the sum of magnitudes is < 2N
    if (!(std::fabs(double(got[i]) - double(want[i])) <= tol) && bad++ < 5)
      ADD_FAILURE() << collective_name(op) << " " << dtype_name(dt) << " rank " << r << " element " << i << ": nccl "
                    << got[i] << ", cpu " << want[i];
  }
  EXPECT_EQ(bad, 0) << collective_name(op) << " " << dtype_name(dt) << " chunk " << chunk;
}

}  // namespace

TEST(CommGpuChild, Collectives) {
  if (!is_child()) GTEST_SKIP() << "runs as a rank of CommGpu.EveryCollectiveMatchesTheCpuCommunicator";
  Rank k(60);
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t chunk : {int64_t(1), int64_t(4097), int64_t(1) << 20})
      for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
                            Collective::all_to_all, Collective::broadcast, Collective::reduce})
        compare(k, op, dt, chunk, int(chunk % 97));
  {
    // all_reduce_many (one NCCL group) of an f32 and a bf16 tensor made by the cuda backend's cast:
    // each as the cpu communicator's all_reduce of the host copies (cast on the host the same way).
    const int r = k.nccl->rank(), w = k.nccl->world();
    const int64_t na = 4097, nb = int64_t(1) << 20;
    std::vector<float> a(static_cast<size_t>(na)), b(static_cast<size_t>(nb));
    for (int64_t i = 0; i < na; ++i) a[size_t(i)] = value(r, i, 3);
    for (int64_t i = 0; i < nb; ++i) b[size_t(i)] = value(r, i, 5);
    Buffer da(k.be->arena(), DType::f32, Shape{na}, "a"), wide(k.be->arena(), DType::f32, Shape{nb}, "wide");
    Buffer db(k.be->arena(), DType::bf16, Shape{nb}, "b"), back(k.be->arena(), DType::f32, Shape{nb}, "back");
    k.be->upload_f32(da.view(), a.data());
    k.be->upload_f32(wide.view(), b.data());
    k.be->cast(db.view(), wide.view());
    std::vector<uint16_t> hb(static_cast<size_t>(nb));
    convert_from_f32(hb.data(), DType::bf16, b.data(), size_t(nb));
    std::vector<float> cast_back(static_cast<size_t>(nb));
    k.be->cast(back.view(), db.view());
    k.be->download_f32(cast_back.data(), back.view());
    int64_t bad_cast = 0;
    for (int64_t i = 0; i < nb; ++i) bad_cast += cast_back[size_t(i)] != bf16_to_f32(hb[size_t(i)]);
    EXPECT_EQ(bad_cast, 0) << "cuda cast f32 -> bf16 -> f32 against the host's rounding";
    k.nccl->wait_host(k.nccl->all_reduce_many({da.view(), db.view()}));
    k.cpu->all_reduce(Tensor(a.data(), DType::f32, Shape{na}));
    k.cpu->all_reduce(Tensor(hb.data(), DType::bf16, Shape{nb}));
    std::vector<float> ga(static_cast<size_t>(na)), gb(static_cast<size_t>(nb));
    k.be->download_f32(ga.data(), da.view());
    k.be->download_f32(gb.data(), db.view());
    int64_t bad = 0;
    for (int64_t i = 0; i < na; ++i)
      bad += !(std::fabs(ga[size_t(i)] - a[size_t(i)]) <= 4.0 * w * std::ldexp(1.0, -23) * w);
    for (int64_t i = 0; i < nb; ++i)
      bad += !(std::fabs(gb[size_t(i)] - bf16_to_f32(hb[size_t(i)])) <= 4.0 * w * std::ldexp(1.0, -8) * w);
    EXPECT_EQ(bad, 0) << "all_reduce_many against the cpu communicator";
  }
  {
    // reduce_many (one NCCL group, ZeRO-2's per-group gradient reduce) to different roots: each root's tensor
    // as the cpu communicator's reduce of the host copies, the others' inputs untouched; i32 words (the norm's
    // parts: one nonzero rank a word) exact.
    const int r = k.nccl->rank(), w = k.nccl->world();
    const int64_t na = 4097, ni = 64;
    std::vector<float> a(static_cast<size_t>(na));
    for (int64_t i = 0; i < na; ++i) a[size_t(i)] = value(r, i, 7);
    std::vector<int32_t> words(static_cast<size_t>(ni), 0);
    for (int64_t i = 0; i < ni; ++i)
      if (i % w == r) words[size_t(i)] = int32_t(0x9e3779b9u * uint32_t(i + 1));
    Buffer da(k.be->arena(), DType::f32, Shape{na}, "a"), di(k.be->arena(), DType::i32, Shape{ni}, "words");
    k.be->upload_f32(da.view(), a.data());
    k.be->copy_wait_host(k.be->copy_to_device_async(di.view(), words.data()));
    k.nccl->wait_host(k.nccl->reduce_many({da.view(), di.view()}, {0, w - 1}));
    const std::vector<float> mine = a;
    const std::vector<int32_t> my_words = words;
    k.cpu->reduce(Tensor(a.data(), DType::f32, Shape{na}), 0);
    k.cpu->reduce(Tensor(words.data(), DType::i32, Shape{ni}), w - 1);
    std::vector<float> ga(static_cast<size_t>(na));
    std::vector<int32_t> gi(static_cast<size_t>(ni));
    k.be->download_f32(ga.data(), da.view());
    k.be->copy_wait_host(k.be->copy_to_host_async(gi.data(), di.view()));
    int64_t bad = 0;
    for (int64_t i = 0; i < na; ++i)
      bad += r == 0 ? !(std::fabs(ga[size_t(i)] - a[size_t(i)]) <= 4.0 * w * std::ldexp(1.0, -23) * w)
                    : ga[size_t(i)] != mine[size_t(i)];
    EXPECT_EQ(bad, 0) << "reduce_many's f32 tensor against the cpu communicator, rank " << r;
    EXPECT_EQ(gi, r == w - 1 ? words : my_words) << "reduce_many's i32 words, rank " << r;
  }
  k.nccl->barrier();
  // Sizes that do not split: the same clear error as the cpu communicator, before NCCL sees them.
  Buffer b(k.be->arena(), DType::f32, Shape{int64_t(k.nccl->world()) * 3 + 1}, "comm.odd");
  Buffer o(k.be->arena(), DType::f32, Shape{3}, "comm.odd_out");
  EXPECT_THROW(k.nccl->reduce_scatter(o.view(), b.view()), UnsupportedError);
}

TEST(CommGpuChild, Timeout) {
  if (!is_child()) GTEST_SKIP() << "runs as a rank of CommGpu.APeerThatStopsCallingIsAnErrorWithinTheTimeout";
  Rank k(3);
  Buffer b(k.be->arena(), DType::f32, Shape{1024}, "comm.t");
  k.be->zero(b.view());
  k.be->synchronize();
  k.nccl->wait_host(k.nccl->all_reduce(b.view()));  // all ranks: the communicator works
  if (k.nccl->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(6));  // never calls the second all_reduce
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    k.nccl->wait_host(k.nccl->all_reduce(b.view()));
    ADD_FAILURE() << "the all_reduce without peers finished";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has not finished"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("was aborted"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  EXPECT_THROW(k.nccl->all_reduce(b.view()), Error);  // stays aborted
}
#endif
