// Tier transfers of the cuda backend (engine/backend.h: reserve_host, copy_to_host_async,
// copy_to_device_async, copy_done, copy_wait_host, copy_wait_compute): round trips through a
// pinned reservation, ordering against queued compute (a copy must see the op's result; an upload
// into a just-released block must not clobber what a queued op still reads), copy/compute
// overlap, and pinned bandwidth. Timings are host wall clock around the backend's own waits (its
// streams are not exposed), on workloads of tens of milliseconds.
#include "tests/gpu/gpu_test_util.h"

#ifdef STRATA_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "engine/backend.h"
#include "engine/backend_cuda.h"

using namespace gpu_test;
using namespace strata;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr size_t kGiB = size_t(1) << 30;
constexpr int kBig = 8192;  // one [kBig, kBig] x [kBig, kBig]^T GEMM: ~1.1 TFLOP, a millisecond or two

// Square bf16 GEMM operands whose values do not matter: they only keep the compute stream busy.
struct BusyWork {
  Buffer x, w, y;
  explicit BusyWork(Backend& be)
      : x(be.arena(), DType::bf16, Shape{kBig, kBig}, "test.busy_x"),
        w(be.arena(), DType::bf16, Shape{kBig, kBig}, "test.busy_w"),
        y(be.arena(), DType::bf16, Shape{kBig, kBig}, "test.busy_y") {
    be.fill(x.view(), 0.01f);
    be.fill(w.view(), 0.01f);
  }
  void enqueue(Backend& be, int n) {
    for (int i = 0; i < n; ++i) be.linear_fwd(y.view(), x.view(), w.view());
  }
};

std::vector<float> bits_to_f32(const void* p, size_t n) {
  std::vector<float> out(n);
  convert_to_f32(out.data(), p, DType::bf16, n);
  return out;
}

}  // namespace

// Device -> pinned host -> device for an f32 and a bf16 tensor of odd sizes; the uploaded copies
// are then read by compute ops ordered only by copy_wait_compute.
TEST(TransferGpu, RoundTripThroughPinnedHost) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(2 * kGiB);
  Arena& ar = be->arena();
  const size_t nf = 1000003, nb = 777777;
  auto f = randn(nf, 1), a = round_bf16(randn(nb, 2)), b = round_bf16(randn(nb, 3));
  Buffer tf(ar, DType::f32, Shape{int64_t(nf)}, "test.f"), ta(ar, DType::bf16, Shape{int64_t(nb)}, "test.a");
  Buffer tb(ar, DType::bf16, Shape{int64_t(nb)}, "test.b");
  be->upload_f32(tf.view(), f.data());
  be->upload_f32(ta.view(), a.data());
  be->upload_f32(tb.view(), b.data());

  // Odd (but 2-byte aligned) offsets inside one reservation.
  const size_t off_f = 6, off_a = off_f + nf * 4 + 10;
  auto host = be->reserve_host(off_a + nb * 2 + 2);
  ASSERT_TRUE(host->pinned()) << host->note;
  ASSERT_EQ(reinterpret_cast<uintptr_t>(host->base()) % 4096, 0u);
  std::memset(host->base(), 0xff, host->bytes());
  CopyTicket t1 = be->copy_to_host_async(host->base() + off_f, tf.view());
  CopyTicket t2 = be->copy_to_host_async(host->base() + off_a, ta.view());
  EXPECT_NE(t1, t2);
  be->copy_wait_host(t2);  // copies finish in order: t1 landed too
  EXPECT_TRUE(be->copy_done(t1));
  EXPECT_TRUE(be->copy_done(t2));
  EXPECT_TRUE(be->copy_done(t2));  // already finished: still done
  EXPECT_EQ(std::memcmp(host->base() + off_f, f.data(), nf * 4), 0) << "f32 device->host differs";
  auto a_bits = to_bf16(a);
  EXPECT_EQ(std::memcmp(host->base() + off_a, a_bits.data(), nb * 2), 0) << "bf16 device->host differs";

  // Back into fresh blocks, then compute reads them.
  Buffer tf2(ar, DType::f32, Shape{int64_t(nf)}, "test.f2"), ta2(ar, DType::bf16, Shape{int64_t(nb)}, "test.a2");
  be->zero(tf2.view());
  be->zero(ta2.view());
  CopyTicket u1 = be->copy_to_device_async(tf2.view(), host->base() + off_f);
  CopyTicket u2 = be->copy_to_device_async(ta2.view(), host->base() + off_a);
  be->copy_wait_compute(u1);
  be->copy_wait_compute(u2);
  Buffer sumsq(ar, DType::f32, Shape{1}, "test.sumsq"), out(ar, DType::bf16, Shape{int64_t(nb)}, "test.out");
  be->zero(sumsq.view());
  be->grad_norm_sq(sumsq.view(), tf2.view());
  be->add_fwd(out.view(), ta2.view(), tb.view(), 0.5f);

  std::vector<float> got_f(nf), got_out(nb), got_sumsq(1);
  be->download_f32(got_f.data(), tf2.view());  // on the compute stream, after the waits
  be->download_f32(got_out.data(), out.view());
  be->download_f32(got_sumsq.data(), sumsq.view());
  EXPECT_EQ(std::memcmp(got_f.data(), f.data(), nf * 4), 0) << "f32 host->device differs";
  std::vector<float> want_out(nb);
  double want_sumsq = 0;
  for (size_t i = 0; i < nb; ++i) want_out[i] = a[i] + 0.5f * b[i];
  for (float v : f) want_sumsq += double(v) * v;
  EXPECT_TRUE(close(got_out, want_out, 1e-5, "add_fwd on uploaded bf16"));
  EXPECT_NEAR(got_sumsq[0], want_sumsq, 1e-4 * want_sumsq) << "grad_norm_sq on uploaded f32";
  // The copy stream finished long ago; polling and waiting are no-ops now.
  EXPECT_TRUE(be->copy_done(u2));
  be->copy_wait_host(u1);
  EXPECT_TRUE(be->copy_done(CopyTicket(987654321)));  // unknown tickets count as done
}

// A device->host copy issued right after a long op writing its source must see the op's result:
// the copy stream waits for everything queued on compute.
TEST(TransferGpu, DeviceToHostWaitsForQueuedCompute) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(4 * kGiB);
  Arena& ar = be->arena();
  const int N = 1024, In = 2048, O = 3072;
  auto x = round_bf16(randn(size_t(N) * In, 4)), w = round_bf16(randn(size_t(O) * In, 5, 0.05f));
  Buffer tx(ar, DType::bf16, Shape{N, In}, "test.x"), tw(ar, DType::bf16, Shape{O, In}, "test.w");
  Buffer ty(ar, DType::bf16, Shape{N, O}, "test.y");
  be->upload_f32(tx.view(), x.data());
  be->upload_f32(tw.view(), w.data());
  be->fill(ty.view(), 1e30f);  // no GEMM result here comes near it
  BusyWork busy(*be);
  be->synchronize();

  auto host = be->reserve_host(ty.view().bytes());
  ASSERT_TRUE(host->pinned()) << host->note;
  std::memset(host->base(), 0xff, host->bytes());
  busy.enqueue(*be, 10);  // tens of milliseconds ahead of the op that writes y
  be->linear_fwd(ty.view(), tx.view(), tw.view());
  CopyTicket t = be->copy_to_host_async(host->base(), ty.view());
  EXPECT_FALSE(be->copy_done(t)) << "the copy finished before the queued GEMMs could have (not ordered?)";
  be->copy_wait_host(t);
  EXPECT_TRUE(be->copy_done(t));

  std::vector<float> want(size_t(N) * O);
  be->download_f32(want.data(), ty.view());  // after the compute stream drained
  auto got = bits_to_f32(host->base(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "host copy differs from the op's result";
  size_t stale = 0;
  for (float v : got) stale += std::abs(v) > 1e29f || std::isnan(v);
  EXPECT_EQ(stale, 0u) << "the copy read y before linear_fwd wrote it";
  // A few entries against the cpu reference (bf16 output: ~3 significant digits).
  for (int r : {0, 517, N - 1})
    for (int o : {0, 1234, O - 1}) {
      double ref = 0;
      for (int i = 0; i < In; ++i) ref += double(x[size_t(r) * In + i]) * w[size_t(o) * In + i];
      EXPECT_NEAR(got[size_t(r) * O + o], ref, 1e-2 * std::max(1.0, std::abs(ref))) << "y[" << r << "," << o << "]";
    }
}

// Use-after-free across streams: a block still read by a queued op is released and handed out
// again at once; an upload into the new block must not land before the old reader ran.
TEST(TransferGpu, UploadIntoReleasedBlockWaitsForEarlierReaders) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(4 * kGiB);
  Arena& ar = be->arena();
  const size_t n = (size_t(1) << 20) + 3;
  auto old_v = round_bf16(randn(n, 6)), new_v = round_bf16(randn(n, 7)), b = round_bf16(randn(n, 8));
  BusyWork busy(*be);
  auto a = std::make_unique<Buffer>(ar, DType::bf16, Shape{int64_t(n)}, "test.a_old");
  Buffer tb(ar, DType::bf16, Shape{int64_t(n)}, "test.b"), out_old(ar, DType::bf16, Shape{int64_t(n)}, "test.o1");
  Buffer out_new(ar, DType::bf16, Shape{int64_t(n)}, "test.o2");
  be->upload_f32(a->view(), old_v.data());
  be->upload_f32(tb.view(), b.data());
  auto host = be->reserve_host(n * 2);
  ASSERT_TRUE(host->pinned()) << host->note;
  auto new_bits = to_bf16(new_v);
  std::memcpy(host->base(), new_bits.data(), n * 2);
  be->synchronize();

  busy.enqueue(*be, 10);
  be->add_fwd(out_old.view(), a->view(), tb.view(), 1.0f);  // queued reader of the old block
  const size_t off = a->offset();
  a.reset();  // released while the reader is still queued
  Buffer a2(ar, DType::bf16, Shape{int64_t(n)}, "test.a_new");
  ASSERT_EQ(a2.offset(), off) << "the arena did not hand the same block out again; the test proves nothing";
  CopyTicket t = be->copy_to_device_async(a2.view(), host->base());
  be->copy_wait_compute(t);
  be->add_fwd(out_new.view(), a2.view(), tb.view(), 1.0f);

  std::vector<float> got_old(n), got_new(n), want_old(n), want_new(n);
  be->download_f32(got_old.data(), out_old.view());
  be->download_f32(got_new.data(), out_new.view());
  be->copy_wait_host(t);
  for (size_t i = 0; i < n; ++i) {
    want_old[i] = old_v[i] + b[i];
    want_new[i] = new_v[i] + b[i];
  }
  EXPECT_TRUE(close(got_old, want_old, 1e-5, "queued reader saw the old data"));
  EXPECT_TRUE(close(got_new, want_new, 1e-5, "later reader saw the upload"));
}

// Offload while computing: a 1 GiB device->host copy issued before a run of GEMMs should hide
// behind them. overlap = (copy alone + compute alone) / (both together); 2 is perfect.
TEST(TransferGpu, DeviceToHostOverlapsCompute) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(4 * kGiB);
  Arena& ar = be->arena();
  Buffer big(ar, DType::bf16, Shape{int64_t(kGiB / 2)}, "test.offload");
  be->fill(big.view(), 1.5f);
  BusyWork busy(*be);
  auto host = be->reserve_host(kGiB);
  ASSERT_TRUE(host->pinned()) << host->note;

  auto time_copy = [&] {
    be->synchronize();
    auto t0 = Clock::now();
    be->copy_wait_host(be->copy_to_host_async(host->base(), big.view()));
    return seconds_since(t0);
  };
  auto time_compute = [&](int n) {
    be->synchronize();
    auto t0 = Clock::now();
    busy.enqueue(*be, n);
    be->synchronize();
    return seconds_since(t0);
  };
  time_copy();  // warm-up: cuBLASLt heuristics, first touch of the copy path
  time_compute(2);
  const double t_copy = time_copy();
  const double t_gemm = time_compute(4) / 4;
  const int n_gemm = std::max(1, int(t_copy / t_gemm + 0.5));  // balance the two sides
  const double t_compute = time_compute(n_gemm);

  be->synchronize();
  auto t0 = Clock::now();
  CopyTicket t = be->copy_to_host_async(host->base(), big.view());  // first, so it is ordered before the GEMMs
  busy.enqueue(*be, n_gemm);
  be->copy_wait_host(t);
  be->synchronize();
  const double t_both = seconds_since(t0);
  const double overlap = (t_copy + t_compute) / t_both;
  std::printf(
      "[ overlap  ] %s\n             D2H 1 GiB alone %.2f ms (%.1f GB/s); %d GEMMs %d^3 alone %.2f ms; "
      "together %.2f ms; overlap %.2f (2 = perfect)\n",
      be->device_name().c_str(), t_copy * 1e3, double(kGiB) / t_copy / 1e9, n_gemm, kBig, t_compute * 1e3, t_both * 1e3,
      overlap);
  EXPECT_GT(overlap, 1.2) << "the copy did not overlap compute";
  const uint16_t* h = reinterpret_cast<const uint16_t*>(host->base());
  size_t bad = 0;
  for (size_t i = 0; i < kGiB / 2; i += 4099) bad += h[i] != 0x3fc0;  // 1.5 in bf16
  EXPECT_EQ(bad, 0u);
}

// A 2 GiB pinned reservation (one cudaHostAlloc, exact size) and the pinned bandwidth each way.
TEST(TransferGpu, PinnedReservationBandwidth) {
  STRATA_REQUIRE_GPU();
  auto be = make_cuda_backend(3 * kGiB);
  auto t0 = Clock::now();
  auto host = be->reserve_host(2 * kGiB);
  const double t_alloc = seconds_since(t0);
  ASSERT_TRUE(host->pinned()) << host->note;
  EXPECT_EQ(host->bytes(), 2 * kGiB);
  EXPECT_TRUE(host->note.empty()) << host->note;
  ASSERT_EQ(reinterpret_cast<uintptr_t>(host->base()) % 4096, 0u);

  Buffer dev(be->arena(), DType::bf16, Shape{int64_t(kGiB / 2)}, "test.bw");
  be->fill(dev.view(), 2.0f);
  // The upload source holds 3.0: after the first round the device and every later download do.
  const uint16_t three = 0x4040;  // 3.0 in bf16
  for (size_t i = 0; i < kGiB / 2; ++i) std::memcpy(host->base() + kGiB + 2 * i, &three, 2);
  double best_d2h = 1e9, best_h2d = 1e9;
  for (int rep = 0; rep < 4; ++rep) {
    be->synchronize();
    auto a = Clock::now();
    be->copy_wait_host(be->copy_to_host_async(host->base(), dev.view()));
    best_d2h = std::min(best_d2h, seconds_since(a));
    a = Clock::now();
    be->copy_wait_host(be->copy_to_device_async(dev.view(), host->base() + kGiB));
    best_h2d = std::min(best_h2d, seconds_since(a));
  }
  const double d2h = double(kGiB) / best_d2h / 1e9, h2d = double(kGiB) / best_h2d / 1e9;
  std::printf("[ pinned   ] %s\n             cudaHostAlloc 2 GiB took %.1f ms; 1 GiB D2H %.1f GB/s, H2D %.1f GB/s\n",
              be->device_name().c_str(), t_alloc * 1e3, d2h, h2d);
  EXPECT_GT(d2h, 10.0);
  EXPECT_GT(h2d, 10.0);
  const uint16_t* h = reinterpret_cast<const uint16_t*>(host->base());
  EXPECT_EQ(h[0], three);
  EXPECT_EQ(h[kGiB / 2 - 1], three);
  std::vector<float> back(16);
  Tensor head(dev.view().data, DType::bf16, Shape{16});
  be->download_f32(back.data(), head);
  EXPECT_EQ(back[0], 3.0f);
  EXPECT_EQ(back[15], 3.0f);
}

#else
TEST(TransferGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without CUDA";
}
#endif
