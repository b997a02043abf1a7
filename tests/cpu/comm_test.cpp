// The cpu communicator (threads and processes modes), checked collective by collective against a
// serial reference on 1-4 ranks, odd sizes, f32 and bf16: bit-exact and the same bits on every rank.
// Also the sim communicator's ring formulas and the profile's collective fields.
#include "engine/comm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "engine/comm_sim.h"
#include "engine/cost_model.h"
#include "engine/rendezvous.h"
#include "tests/cpu/expect_error.h"

using namespace strata;

namespace {

// Runs fn(comm) on `world` threads of one CpuGroup; a rank that throws aborts the group. Returns each
// rank's exception message ("" when it returned).
std::vector<std::string> run_ranks(int world, const std::function<void(Communicator&)>& fn, double timeout_s = 30) {
  CpuGroup group(world, timeout_s);
  std::vector<std::string> err(static_cast<size_t>(world));
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        auto c = make_cpu_communicator(group, r);
        fn(*c);
      } catch (const std::exception& e) {
        err[size_t(r)] = e.what();
        group.abort(fmt::format("rank {} failed", r));
      }
    });
  for (auto& t : ts) t.join();
  return err;
}

// Rank r's input: n values of dtype dt, distinct per rank and per seed, as raw bytes.
std::vector<std::byte> input(int r, int64_t n, DType dt, int seed) {
  std::vector<std::byte> b(size_t(n) * dtype_size(dt));
  uint32_t s = uint32_t(seed * 7919 + r * 104729 + 1);
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float v = (float(s >> 8) / float(1 << 24) - 0.5f) * float(1 + (i % 5)) * 3.7f;
    convert_from_f32(b.data() + size_t(i) * dtype_size(dt), dt, &v, 1);
  }
  return b;
}

float at(const std::vector<std::byte>& b, DType dt, int64_t i) {
  float v;
  convert_to_f32(&v, b.data() + size_t(i) * dtype_size(dt), dt, 1);
  return v;
}

// The documented sum: fp32 in rank order 0..N-1, rounded once to dt.
std::vector<std::byte> serial_sum(const std::vector<std::vector<std::byte>>& ins, DType dt, int64_t off, int64_t n) {
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float a = at(ins[0], dt, off + i);
    for (size_t r = 1; r < ins.size(); ++r) a += at(ins[r], dt, off + i);
    acc[size_t(i)] = a;
  }
  std::vector<std::byte> out(size_t(n) * dtype_size(dt));
  convert_from_f32(out.data(), dt, acc.data(), size_t(n));
  return out;
}

Tensor view(std::vector<std::byte>& b, DType dt) {
  return Tensor(b.data(), dt, Shape{int64_t(b.size() / dtype_size(dt))});
}

// What each rank's output of `op` must be, from every rank's input (the reference, written out serially).
std::vector<std::byte> expected(Collective op, int rank, int world, const std::vector<std::vector<std::byte>>& ins,
                                DType dt, int64_t chunk, int root) {
  const size_t es = dtype_size(dt);
  std::vector<std::byte> out;
  switch (op) {
    case Collective::all_reduce:
      return serial_sum(ins, dt, 0, int64_t(ins[0].size() / es));
    case Collective::reduce_scatter:
      return serial_sum(ins, dt, rank * chunk, chunk);
    case Collective::all_gather:
      for (int r = 0; r < world; ++r) out.insert(out.end(), ins[size_t(r)].begin(), ins[size_t(r)].end());
      return out;
    case Collective::all_to_all:
      for (int r = 0; r < world; ++r)
        out.insert(out.end(), ins[size_t(r)].begin() + ptrdiff_t(size_t(rank * chunk) * es),
                   ins[size_t(r)].begin() + ptrdiff_t(size_t((rank + 1) * chunk) * es));
      return out;
    case Collective::broadcast:
      return ins[size_t(root)];
    case Collective::reduce:  // the root's is the sum; every other rank keeps its input
      return rank == root ? serial_sum(ins, dt, 0, int64_t(ins[0].size() / es)) : ins[size_t(rank)];
    default:
      return out;
  }
}

// Runs one collective on every rank and checks each output against the reference and the others.
void check_collective_on(int world, Collective op, DType dt, int64_t chunk, int seed) {
  const int root = world - 1;
  const int64_t n_in = op == Collective::all_gather || op == Collective::all_reduce || op == Collective::broadcast ||
                               op == Collective::reduce
                           ? chunk
                           : chunk * world;
  const int64_t n_out = op == Collective::all_gather ? chunk * world : op == Collective::reduce_scatter ? chunk : n_in;
  std::vector<std::vector<std::byte>> ins(static_cast<size_t>(world)), outs(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) ins[size_t(r)] = input(r, n_in, dt, seed);
  auto err = run_ranks(world, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<std::byte> in = ins[size_t(r)];
    std::vector<std::byte> out(size_t(n_out) * dtype_size(dt), std::byte{0x5a});
    CommTicket t = 0;
    switch (op) {
      case Collective::all_reduce:
        t = c.all_reduce(view(in, dt)), out = in;
        break;
      case Collective::broadcast:
        t = c.broadcast(view(in, dt), root), out = in;
        break;
      case Collective::reduce:
        t = c.reduce(view(in, dt), root), out = in;
        break;
      case Collective::reduce_scatter:
        t = c.reduce_scatter(view(out, dt), view(in, dt));
        break;
      case Collective::all_gather:
        t = c.all_gather(view(out, dt), view(in, dt));
        break;
      case Collective::all_to_all:
        t = c.all_to_all(view(out, dt), view(in, dt));
        break;
      default:
        break;
    }
    EXPECT_TRUE(c.done(t));  // cpu: synchronous
    outs[size_t(r)] = out;
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(err[size_t(r)], "") << "rank " << r;
    const auto want = expected(op, r, world, ins, dt, chunk, root);
    ASSERT_EQ(outs[size_t(r)].size(), want.size());
    EXPECT_EQ(std::memcmp(outs[size_t(r)].data(), want.data(), want.size()), 0)
        << collective_name(op) << " world " << world << " " << dtype_name(dt) << " chunk " << chunk << " rank " << r;
  }
  // The sum is the same bits on every rank.
  if (op == Collective::all_reduce || op == Collective::broadcast) {
    for (int r = 1; r < world; ++r) EXPECT_EQ(outs[size_t(r)], outs[0]) << "rank " << r;
  }
}

}  // namespace

TEST(CpuComm, EveryCollectiveMatchesTheSerialReference) {
  for (int world = 1; world <= 4; ++world)
    for (DType dt : {DType::f32, DType::bf16})
      for (int64_t chunk : {1, 7, 33, 1001})
        for (Collective op : {Collective::all_reduce, Collective::reduce_scatter, Collective::all_gather,
                              Collective::all_to_all, Collective::broadcast, Collective::reduce})
          check_collective_on(world, op, dt, chunk, int(chunk) + world);
}

// The order is part of the contract: a sum whose value depends on it (1e8 + 1 - 1e8 in fp32) comes out
// as the rank-order sum ((1e8 + 1) + -1e8 = 0, not 1), on every rank and every run.
TEST(CpuComm, SumsInRankOrder) {
  for (int run = 0; run < 3; ++run) {
    std::vector<float> got(3);
    auto err = run_ranks(3, [&](Communicator& c) {
      const float mine[3] = {1e8f, 1.0f, -1e8f};
      float v = mine[c.rank()];
      c.all_reduce(Tensor(&v, DType::f32, Shape{1}));
      got[size_t(c.rank())] = v;
    });
    for (auto& e : err) ASSERT_EQ(e, "");
    EXPECT_EQ(got, std::vector<float>(3, (1e8f + 1.0f) + -1e8f));
    EXPECT_EQ(got[0], 0.0f);
  }
}

// all_reduce_many: tensors of different sizes and dtypes, each summed as all_reduce would (rank
// order), one ticket; an empty list is an error.
TEST(CpuComm, AllReduceManySumsEachTensorAsAllReduce) {
  std::vector<std::vector<float>> got_f(3), want_f(3);
  std::vector<std::vector<uint16_t>> got_b(3), want_b(3);
  auto err = run_ranks(3, [&](Communicator& c) {
    const size_t r = size_t(c.rank());
    std::vector<float> a(5), b(5);
    std::vector<uint16_t> h(7), k(7);
    for (size_t i = 0; i < a.size(); ++i) a[i] = b[i] = 0.1f * float(i + 1) * float(r + 1) + (r == 1 ? 1e7f : 0.f);
    for (size_t i = 0; i < h.size(); ++i) h[i] = k[i] = f32_to_bf16(0.3f * float(i) - float(r));
    const CommTicket t =
        c.all_reduce_many({Tensor(a.data(), DType::f32, Shape{5}), Tensor(h.data(), DType::bf16, Shape{7})});
    c.wait_host(t);
    EXPECT_TRUE(c.done(t));
    c.wait_host(c.all_reduce(Tensor(b.data(), DType::f32, Shape{5})));
    c.wait_host(c.all_reduce(Tensor(k.data(), DType::bf16, Shape{7})));
    got_f[r] = a, want_f[r] = b, got_b[r] = h, want_b[r] = k;
    EXPECT_THROW(c.all_reduce_many({}), Error);
  });
  for (auto& e : err) ASSERT_EQ(e, "");
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(got_f[r], want_f[r]) << "rank " << r;
    EXPECT_EQ(got_b[r], want_b[r]) << "rank " << r;
    EXPECT_EQ(got_f[r], got_f[0]);
  }
  EXPECT_NE(got_f[0][0], 0.1f);  // summed
}

// reduce_many (ZeRO-2: each gradient to its owner): tensors of different sizes and dtypes to different
// roots, each as reduce would (the root gets the rank-order sum, the others keep their input), one ticket;
// i32 words of any bits with one nonzero rank per element come out exact (the norm's parts); a root
// outside the ranks and a roots list of another length are errors.
TEST(CpuComm, ReduceManyReducesEachTensorToItsRoot) {
  const int world = 3;
  std::vector<std::vector<float>> got_f(world);
  std::vector<std::vector<uint16_t>> got_b(world);
  std::vector<std::vector<int32_t>> got_i(world);
  auto input_f = [](size_t r) {
    std::vector<float> a(5);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * float(i + 1) * float(r + 1) + (r == 1 ? 1e7f : 0.f);
    return a;
  };
  auto input_b = [](size_t r) {
    std::vector<uint16_t> h(7);
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_bf16(0.3f * float(i) - float(r));
    return h;
  };
  // Word i is rank (i % world)'s: a double's bits there, 0 on the other ranks.
  auto input_i = [&](size_t r) {
    std::vector<int32_t> w(8, 0);
    for (size_t i = 0; i < w.size(); i += 2)
      if (i / 2 % world == r) {
        const double d = 1.0 / double(i + 3) + 1e-300 * double(r);
        std::memcpy(&w[i], &d, sizeof d);
      }
    return w;
  };
  auto err = run_ranks(world, [&](Communicator& c) {
    const size_t r = size_t(c.rank());
    std::vector<float> a = input_f(r);
    std::vector<uint16_t> h = input_b(r);
    std::vector<int32_t> w = input_i(r);
    const CommTicket t = c.reduce_many({Tensor(a.data(), DType::f32, Shape{5}), Tensor(h.data(), DType::bf16, Shape{7}),
                                        Tensor(w.data(), DType::i32, Shape{8})},
                                       {2, 0, 1});
    c.wait_host(t);
    EXPECT_TRUE(c.done(t));
    got_f[r] = a, got_b[r] = h, got_i[r] = w;
    EXPECT_THROW(c.reduce_many({Tensor(a.data(), DType::f32, Shape{5})}, {3}), Error);
    EXPECT_THROW(c.reduce_many({Tensor(a.data(), DType::f32, Shape{5})}, {0, 1}), Error);
    EXPECT_THROW(c.reduce_many({}, {}), Error);
  });
  for (auto& e : err) ASSERT_EQ(e, "");
  std::vector<float> sum_f(5);
  std::vector<uint16_t> sum_b(7);
  for (size_t i = 0; i < 5; ++i) sum_f[i] = (input_f(0)[i] + input_f(1)[i]) + input_f(2)[i];
  for (size_t i = 0; i < 7; ++i)
    sum_b[i] = f32_to_bf16((bf16_to_f32(input_b(0)[i]) + bf16_to_f32(input_b(1)[i])) + bf16_to_f32(input_b(2)[i]));
  std::vector<int32_t> all_i(8, 0);
  for (size_t r = 0; r < world; ++r)
    for (size_t i = 0; i < 8; ++i) all_i[i] |= input_i(r)[i];
  for (size_t r = 0; r < world; ++r) {
    EXPECT_EQ(got_f[r], r == 2 ? sum_f : input_f(r)) << "rank " << r;
    EXPECT_EQ(got_b[r], r == 0 ? sum_b : input_b(r)) << "rank " << r;
    EXPECT_EQ(got_i[r], r == 1 ? all_i : input_i(r)) << "rank " << r;
  }
  EXPECT_NE(sum_f[0], input_f(2)[0]);  // summed
}

TEST(CpuComm, SizesThatDoNotSplitAreClearErrors) {
  auto err = run_ranks(3, [&](Communicator& c) {
    std::vector<float> in(10), out(3), big(10);
    auto e = test_util::catch_as<UnsupportedError>(
        [&] { c.reduce_scatter(Tensor(out.data(), DType::f32, Shape{3}), Tensor(in.data(), DType::f32, Shape{10})); });
    ASSERT_TRUE(e);
    EXPECT_NE(std::string(e->what()).find("10 elements do not split into 3 equal chunks"), std::string::npos)
        << e->what();
    EXPECT_NE(std::string(e->what()).find("pad"), std::string::npos);
    EXPECT_THROW(c.all_to_all(Tensor(big.data(), DType::f32, Shape{10}), Tensor(in.data(), DType::f32, Shape{10})),
                 UnsupportedError);
    // Sizes that split but do not match.
    auto m = test_util::catch_as<Error>(
        [&] { c.all_gather(Tensor(in.data(), DType::f32, Shape{9}), Tensor(out.data(), DType::f32, Shape{2})); });
    ASSERT_TRUE(m);
    EXPECT_NE(std::string(m->what()).find("world size 3 x the input's 2 elements is 6"), std::string::npos)
        << m->what();
    std::vector<int16_t> i16(3);
    EXPECT_THROW(c.all_reduce(Tensor(i16.data(), DType::i16, Shape{3})), UnsupportedError);
    float x = 0;
    EXPECT_THROW(c.broadcast(Tensor(&x, DType::f32, Shape{1}), 3), Error);
    // In place is not an all_to_all.
    EXPECT_THROW(c.all_to_all(Tensor(in.data(), DType::f32, Shape{9}), Tensor(in.data(), DType::f32, Shape{9})), Error);
    c.barrier();  // the errors were caught before any exchange: the ranks are still in step
  });
  for (auto& e : err) EXPECT_EQ(e, "");
}

TEST(CpuComm, RanksCallingDifferentCollectivesAreNamed) {
  auto err = run_ranks(2, [&](Communicator& c) {
    std::vector<float> v(4);
    if (c.rank() == 0)
      c.all_reduce(Tensor(v.data(), DType::f32, Shape{4}));
    else
      c.broadcast(Tensor(v.data(), DType::f32, Shape{4}), 0);
  });
  for (auto& e : err) {
    EXPECT_NE(e.find("different collectives"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 broadcast"), std::string::npos) << e;
  }
}

TEST(CpuComm, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  auto err = run_ranks(
      4,
      [&](Communicator& c) {
        if (c.rank() == 2) return;  // never calls
        float v = 1;
        c.all_reduce(Tensor(&v, DType::f32, Shape{1}));
      },
      0.3);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  for (int r : {0, 1, 3}) {
    EXPECT_NE(err[size_t(r)].find("rank 2 of 4 did not arrive within 0.3 s"), std::string::npos) << err[size_t(r)];
  }
  EXPECT_EQ(err[2], "");
}

// Processes mode: the same collectives through the TCP rendezvous (ranks as threads here; the launcher
// test runs them as processes) give the same bits as threads mode.
TEST(CpuComm, ProcessesModeOverTheRendezvousMatchesThreadsMode) {
  const int world = 3, port = pick_free_port();
  const int64_t chunk = 5;
  std::vector<std::vector<std::byte>> sums(world), a2a(world), ins(world);
  for (int r = 0; r < world; ++r) ins[size_t(r)] = input(r, chunk * world, DType::bf16, 11);
  std::vector<std::string> err(world);
  std::vector<std::thread> ts;
  for (int r = 0; r < world; ++r)
    ts.emplace_back([&, r] {
      try {
        auto rdv = Rendezvous::join(RendezvousOptions{"127.0.0.1", port, r, world, 20});
        auto c = make_cpu_communicator(*rdv);
        EXPECT_EQ(c->rank(), r);
        std::vector<std::byte> in = ins[size_t(r)], out(in.size());
        c->all_to_all(view(out, DType::bf16), view(in, DType::bf16));
        a2a[size_t(r)] = out;
        c->all_reduce(view(in, DType::bf16));
        sums[size_t(r)] = in;
        c->barrier();
      } catch (const std::exception& e) {
        err[size_t(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(err[size_t(r)], "");
    EXPECT_EQ(sums[size_t(r)], serial_sum(ins, DType::bf16, 0, chunk * world)) << r;
    EXPECT_EQ(a2a[size_t(r)], expected(Collective::all_to_all, r, world, ins, DType::bf16, chunk, 0)) << r;
  }
}

// --- the sim communicator.
TEST(SimComm, RingFormulas) {
  DeviceProfile p = find_profile("h100_80gb");
  p.nccl_busbw_gbps = 100, p.nccl_latency_us = 10;
  const double S = 1e9;  // bytes
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::all_reduce, S, 4), 10e-6 + S * 2 * 3 / 4 / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::reduce_scatter, S, 4), 10e-6 + S * 3 / 4 / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::all_gather, S, 2), 10e-6 + S / 2 / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::all_to_all, S, 8), 10e-6 + S * 7 / 8 / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::broadcast, S, 3), 10e-6 + S / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::reduce, S, 4), 10e-6 + S / 100e9);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::reduce, S, 1), 0.0);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::all_reduce, S, 1), 0.0);
  EXPECT_DOUBLE_EQ(collective_seconds(p, Collective::all_gather, S, 1), 2 * S / (p.hbm_gbps * 1e9));
}

TEST(SimComm, OverlapsComputeOnCudaAndAllocatesNothing) {
  SimOptions o;
  o.profile = find_profile("h100_80gb");
  o.profile.nccl_compute_overlap = 1;  // compute beside a collective loses nothing (below: it does)
  auto be = make_sim_backend(o);
  auto c = make_sim_communicator(*be, 1, 4);
  EXPECT_EQ(c->rank(), 1);
  EXPECT_EQ(c->world(), 4);
  const size_t in_use = be->arena().in_use();
  Tensor g(nullptr, DType::f32, Shape{256, 1024, 1024});  // 1 GiB of gradients
  const double t0 = be->now_s();
  CommTicket t = c->all_reduce(g);
  EXPECT_EQ(be->now_s(), t0);  // issued, not waited for: the compute clock did not move
  EXPECT_FALSE(c->done(t));
  EXPECT_EQ(be->arena().in_use(), in_use);
  c->wait_host(t);
  const double want = collective_seconds(o.profile, Collective::all_reduce, double(g.bytes()), 4);
  EXPECT_NEAR(be->now_s() - t0, want, 1e-12);
  EXPECT_GT(want, 4e-3);  // ~1.5 x 1 GiB at 330 GB/s
  EXPECT_TRUE(c->done(t));
  EXPECT_NEAR(be->times().comm_wait_s, want, 1e-12);
  EXPECT_EQ(c->times().collectives, 1);
  // Two back to back: the second starts when the first ends.
  const double t1 = be->now_s();
  c->all_reduce(g);
  CommTicket t3 = c->reduce_scatter(Tensor(nullptr, DType::f32, Shape{64, 1024, 1024}), g);
  c->wait_host(t3);
  EXPECT_NEAR(be->now_s() - t1, want + collective_seconds(o.profile, Collective::reduce_scatter, double(g.bytes()), 4),
              1e-12);
  // The cpu mirror is synchronous, as the cpu communicator is.
  o.mirror = SimMirror::cpu;
  auto cb = make_sim_backend(o);
  auto cc = make_sim_communicator(*cb, 0, 2);
  cc->all_reduce(g);
  EXPECT_NEAR(cb->now_s(), collective_seconds(o.profile, Collective::all_reduce, double(g.bytes()), 2), 1e-12);
  EXPECT_THROW(c->all_gather(Tensor(nullptr, DType::f32, Shape{10}), Tensor(nullptr, DType::f32, Shape{3})), Error);
}

// nccl_compute_overlap h < 1: a collective slows the compute beside it by (1 - h) of its time; compute
// that waits for the collective's end anyway ends no later than the collective.
TEST(SimComm, ComputeBesideACollectiveLosesWhatTheProfileSays) {
  SimOptions o;
  o.profile = find_profile("h100_80gb");
  o.profile.nccl_compute_overlap = 0.25;
  auto be = make_sim_backend(o);
  auto c = make_sim_communicator(*be, 0, 2);
  Tensor g(nullptr, DType::f32, Shape{256, 1024, 1024});
  const double s = collective_seconds(o.profile, Collective::all_reduce, double(g.bytes()), 2);
  const double t0 = be->now_s();
  CommTicket t = c->all_reduce(g);
  EXPECT_NEAR(be->now_s() - t0, 0.75 * s, 1e-12);
  EXPECT_NEAR(be->times().comm_contention_s, 0.75 * s, 1e-12);
  c->wait_host(t);
  EXPECT_NEAR(be->now_s() - t0, s, 1e-12);  // absorbed by the wait: the collective ends at s
  o.profile.nccl_compute_overlap = 1.5;
  EXPECT_THROW(profile_from_json(profile_to_json(o.profile), "test"), ConfigError);
}

// As nccl's group call: one collective over the summed bytes, one latency.
TEST(SimComm, AllReduceManyIsOneCollectiveOverTheSummedBytes) {
  SimOptions o;
  o.profile = find_profile("h100_80gb");
  auto be = make_sim_backend(o);
  auto c = make_sim_communicator(*be, 0, 4);
  Tensor a(nullptr, DType::f32, Shape{1024, 1024}), b(nullptr, DType::bf16, Shape{512, 1024});
  const double t0 = be->now_s();
  c->wait_host(c->all_reduce_many({a, b}));
  EXPECT_NEAR(be->now_s() - t0, collective_seconds(o.profile, Collective::all_reduce, double(a.bytes() + b.bytes()), 4),
              1e-12);
  EXPECT_EQ(c->times().collectives, 1);
  EXPECT_EQ(c->times().bytes, double(a.bytes() + b.bytes()));
}

// reduce_many, as nccl's group: one collective (one latency) over the summed bytes, timed as a reduce.
TEST(SimComm, ReduceManyIsOneCollectiveOverTheSummedBytes) {
  SimOptions o;
  o.profile = find_profile("h100_80gb");
  auto be = make_sim_backend(o);
  auto c = make_sim_communicator(*be, 1, 4);
  Tensor a(nullptr, DType::f32, Shape{1024, 1024}), b(nullptr, DType::bf16, Shape{512, 1024});
  const double t0 = be->now_s();
  c->wait_host(c->reduce_many({a, b}, {0, 3}));
  EXPECT_NEAR(be->now_s() - t0, collective_seconds(o.profile, Collective::reduce, double(a.bytes() + b.bytes()), 4),
              1e-12);
  EXPECT_EQ(c->times().collectives, 1);
  EXPECT_EQ(c->times().bytes, double(a.bytes() + b.bytes()));
  EXPECT_THROW(c->reduce_many({a}, {4}), Error);
}

TEST(SimComm, ProfileFieldsRoundTripAndDefault) {
  DeviceProfile p = find_profile("h200");
  EXPECT_EQ(p.nccl_busbw_gbps, 330);
  EXPECT_EQ(p.nccl_latency_us, 20);
  p.nccl_busbw_gbps = 123.5, p.nccl_latency_us = 7;
  DeviceProfile q = profile_from_json(profile_to_json(p), "x.json");
  EXPECT_EQ(q.nccl_busbw_gbps, 123.5);
  EXPECT_EQ(q.nccl_latency_us, 7);
  // A file from before the fields: the documented defaults.
  DeviceProfile old = profile_from_json(
      R"({"name": "x", "memory_bytes": 1, "matmul_tflops": 1, "attention_tflops": 1, "hbm_gbps": 1, "h2d_gbps": 1,
          "d2h_gbps": 1})",
      "old.json");
  EXPECT_EQ(old.nccl_busbw_gbps, 330);
  EXPECT_EQ(old.nccl_latency_us, 20);
  auto e = test_util::catch_as<ConfigError>([&] {
    profile_from_json(
        R"({"name": "x", "memory_bytes": 1, "matmul_tflops": 1, "attention_tflops": 1, "hbm_gbps": 1, "h2d_gbps": 1,
            "d2h_gbps": 1, "nccl_busbw_gbps": 0})",
        "bad.json");
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "nccl_busbw_gbps");
}
