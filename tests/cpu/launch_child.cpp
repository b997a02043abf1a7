// A rank for launch_ranks_test, started by run_local_ranks (RANK, WORLD_SIZE, MASTER_* set):
//   strata-launch-child fail R CODE   rank R exits with CODE after 0.2 s; the others sleep 60 s, exit 0
//   strata-launch-child allreduce     joins the TCP rendezvous, runs the cpu communicator (processes
//                                     mode) and checks an all_reduce and an all_gather; exit 0 when right
//   strata-launch-child session YAML   one rank of a library Session built from the YAML (model/run/job.h):
//                                     runs its loop and saves to output_dir; exit 0 when it trained
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm.h"
#include "model/run/launch.h"
#include "strata/strata.h"

using namespace strata;

int main(int argc, char** argv) {
  try {
    const LaunchEnv env = read_launch_env();
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "fail" && argc == 4) {
      if (env.rank == std::atoi(argv[2])) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        return std::atoi(argv[3]);
      }
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return 0;
    }
    if (mode == "allreduce") {
      RendezvousOptions o = env.rendezvous();
      o.timeout_s = 20;
      auto rdv = Rendezvous::join(o);
      auto c = make_cpu_communicator(*rdv);
      std::vector<float> v(7);
      for (int i = 0; i < 7; ++i) v[size_t(i)] = float(env.rank + 1) + 0.25f * float(i);
      c->all_reduce(Tensor(v.data(), DType::f32, Shape{7}));
      const int w = env.world;
      for (int i = 0; i < 7; ++i) {
        const float want = float(w * (w + 1) / 2) + 0.25f * float(i) * float(w);
        if (v[size_t(i)] != want) {
          std::fprintf(stderr, "rank %d: element %d is %g, expected %g\n", env.rank, i, v[size_t(i)], want);
          return 1;
        }
      }
      int32_t mine = env.rank * 10 + env.local_rank;
      std::vector<int32_t> all(static_cast<size_t>(w));
      c->all_gather(Tensor(all.data(), DType::i32, Shape{w}), Tensor(&mine, DType::i32, Shape{1}));
      for (int r = 0; r < w; ++r)
        if (all[size_t(r)] != r * 11) {
          std::fprintf(stderr, "rank %d: all_gather[%d] = %d\n", env.rank, r, all[size_t(r)]);
          return 1;
        }
      c->barrier();
      std::printf("rank %d of %d ok\n", env.rank, w);
      return 0;
    }
    if (mode == "session" && argc == 3) {
      strata::SessionConfig cfg;
      strata::apply_yaml(cfg, argv[2]);
      strata::Session s(strata::make_backend("cpu"), cfg);
      s.run();
      s.save();
      std::printf("rank %d of %d: %d steps\n", env.rank, env.world, s.steps_done());
      return s.steps_done() > 0 ? 0 : 1;
    }
    std::fprintf(stderr, "usage: strata-launch-child fail R CODE | allreduce | session YAML\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-launch-child: %s\n", e.what());
    return 1;
  }
}
