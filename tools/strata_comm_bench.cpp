// strata-comm-bench: all_reduce bus bandwidth and latency between ranks, for the sim's profile fields
// (DeviceProfile::nccl_busbw_gbps, nccl_latency_us). `--gpus N` starts N local ranks itself; under
// torchrun or srun each process is one rank. --backend cpu runs the cpu communicator over the TCP
// rendezvous (a check of the launch path without a GPU; its numbers are not NCCL's).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/comm.h"
#include "engine/rendezvous.h"
#include "model/run/launch.h"
#include "model/run/train_config.h"
#include "tools/backend_select.h"
#include "tools/cli.h"
#ifdef STRATA_HAVE_NCCL
#include <cuda_runtime.h>

#include "kernels/comm_nccl.h"
#endif

using namespace strata;

static const char* kUsage =
    "usage: strata-comm-bench [--gpus N] [--backend nccl|cpu] [--bytes 1GiB] [--iters 20] [--help]\n"
    "Times all_reduce (sum, f32, in place) of --bytes, --bytes/8 and --bytes/64 and of 4 bytes between the\n"
    "ranks, after checking one result. Prints the time, algorithm and bus bandwidth per size (bus bandwidth\n"
    "as nccl-tests defines it: algbw x 2(N-1)/N), then one JSON line with nccl_busbw_gbps (the largest size)\n"
    "and nccl_latency_us (4 bytes) for a device profile. --gpus N starts N ranks on this node (one per GPU);\n"
    "under torchrun or srun each process is one rank.\n";

int main(int argc, char** argv) {
  if (std::optional<int> rc = launch_hook(argc, argv, "strata-comm-bench", true)) return *rc;
  try {
    cli::Args a(argc, argv, {"backend", "bytes", "iters"}, {"help"});
    if (a.has("help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const std::string backend = a.str("backend", "nccl");
    if (backend != "nccl" && backend != "cpu")
      throw ConfigError(fmt::format("--backend expects nccl or cpu, got '{}'", backend), "command line", "backend");
    const size_t bytes = parse_bytes(a.str("bytes", backend == "cpu" ? "4MiB" : "1GiB"), "--bytes");
    const long iters = a.integer("iters", backend == "cpu" ? 3 : 20);
    if (bytes < 256 || iters < 1)
      throw ConfigError("--bytes must be at least 256 and --iters at least 1", "command line", "bytes");
    const LaunchEnv env = read_launch_env();
    std::unique_ptr<Backend> be;
    std::unique_ptr<Rendezvous> rdv = Rendezvous::join(env.rendezvous());
    std::unique_ptr<Communicator> comm;
    std::string device = "cpu";
    if (backend == "nccl") {
#ifdef STRATA_HAVE_NCCL
      if (cudaSetDevice(env.local_rank) != cudaSuccess)
        throw UnsupportedError(
            fmt::format("strata-comm-bench: rank {} cannot use GPU {} (LOCAL_RANK)", env.rank, env.local_rank));
      be = make_backend("cuda", bytes + (size_t(256) << 20));
      comm = make_nccl_communicator(*rdv, NcclOptions{env.local_rank, nullptr, env.timeout_s});
      device = fmt::format("{}, NCCL {}", be->device_name(), nccl_version());
#else
      throw UnsupportedError(
          "strata-comm-bench: this build has no NCCL (built without CUDA or without nccl.h); "
          "use --backend cpu");
#endif
    } else {
      be = make_backend("cpu", bytes + (size_t(64) << 20));
      comm = make_cpu_communicator(*rdv);
    }
    const int n = comm->world();
    Buffer buf(be->arena(), DType::f32, Shape{int64_t(bytes / 4)}, "comm_bench");
    // One checked result: every rank fills rank + 1, the sum is N(N+1)/2 everywhere.
    be->fill(buf.view(), float(comm->rank() + 1));
    be->synchronize();
    comm->wait_host(comm->all_reduce(buf.view()));
    float first = 0, last = 0;
    std::vector<float> host(size_t(buf.view().numel()));
    be->download_f32(host.data(), buf.view());
    first = host.front(), last = host.back();
    if (first != float(n * (n + 1) / 2) || last != first)
      throw Error(fmt::format("strata-comm-bench: rank {}: all_reduce gave {} and {}, expected {}", comm->rank(), first,
                              last, n * (n + 1) / 2));
    if (comm->rank() == 0)
      std::printf("strata-comm-bench: %d rank%s, %s (rank 0), all_reduce f32 sum in place\n", n, n > 1 ? "s" : "",
                  device.c_str());
    double busbw = 0, latency_us = 0;
    for (size_t size : {size_t(4), bytes / 64 / 4 * 4, bytes / 8 / 4 * 4, bytes / 4 * 4}) {
      Tensor t = buf.view().reshape(Shape{int64_t(bytes / 4)});
      t = Tensor(t.data, DType::f32, Shape{int64_t(size / 4)});
      comm->wait_host(comm->all_reduce(t));  // warm-up
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      CommTicket last_t = 0;
      for (long i = 0; i < iters; ++i) last_t = comm->all_reduce(t);
      comm->wait_host(last_t);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(iters);
      const double algbw = double(size) / s / 1e9, bus = algbw * 2.0 * (n - 1) / n;
      if (size == 4) latency_us = s * 1e6;
      busbw = bus;
      if (comm->rank() == 0)
        std::printf("  %12s  %10.3f ms  algbw %8.2f GB/s  busbw %8.2f GB/s\n", format_bytes(size).c_str(), s * 1e3,
                    algbw, bus);
    }
    comm->barrier();
    if (comm->rank() == 0)
      std::printf(
          "{\"world\": %d, \"backend\": \"%s\", \"bytes\": %zu, \"nccl_busbw_gbps\": %.2f, "
          "\"nccl_latency_us\": %.2f}\n",
          n, backend.c_str(), bytes, busbw, latency_us);
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "strata-comm-bench: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "strata-comm-bench: error: %s\n", e.what());
    return 1;
  }
}
