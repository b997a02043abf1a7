// Shared by train_loop_test and resume_test: a tiny model, its trainer and a TrainLoop built from
// a TrainConfig as strata-train builds them (cpu backend, random base weights), and a snapshot of
// every trainable parameter's state bytes, read from memory independently of model/run/checkpoint.cpp.
#pragma once
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "model/data/data.h"
#include "model/llama/llama.h"
#include "model/run/train_loop.h"
#include "tests/cpu/tiny_model.h"

namespace strata::test_util {

inline std::FILE* devnull() {
  static std::FILE* f = std::fopen("/dev/null", "w");
  return f;
}

inline LoopOptions quiet() {
  LoopOptions lo;
  lo.info = devnull();
  lo.text = nullptr;
  return lo;
}

struct Rig {
  std::unique_ptr<Backend> be;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<TrainLoop> loop;
};

inline Rig make_rig(const TrainConfig& cfg, LoopOptions lo = quiet(), long n_tokens = 400,
                    io::LlamaConfig c = tiny_config()) {
  Rig r;
  r.be = make_cpu_backend(size_t(64) << 20);
  r.model = std::make_unique<LlamaModel>(*r.be, c, model_options(cfg));
  r.model->init_random(11);  // stands for the base checkpoint: the same weights every time
  TrainOptions to = train_options(cfg);
  to.tiers.offload_dir = ::testing::TempDir();
  to.time_parts = lo.json;  // as Job: the JSON lines carry the parts
  r.trainer = std::make_unique<Trainer>(*r.be, *r.model, to);
  r.loop = std::make_unique<TrainLoop>(cfg, *r.be, *r.model, *r.trainer, synthetic_tokens(n_tokens, c.vocab_size, 5),
                                       std::move(lo));
  return r;
}

// Each trainable parameter's weights, master (where separate), moments and 8-bit scales, as bytes.
inline std::vector<std::vector<std::byte>> state_bytes(const LlamaModel& m) {
  std::vector<std::vector<std::byte>> out;
  auto take = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.emplace_back(b, b + n);
  };
  m.sync_state();  // a deferred update lands first
  for (const Parameter& p : m.params()) {
    if (!p.trainable) continue;
    const size_t n = size_t(p.shape.numel());
    take(p.value().data, p.value().bytes());
    if (p.host_master != Parameter::kDevice) {
      take(m.host_state(p.host_master), n * sizeof(float));
    } else if (p.disk_master != Parameter::kDevice) {  // the disk tier: as the host tier holds it
      std::vector<std::byte> b(n * sizeof(float));
      m.read_state_disk(p.disk_master, b.data(), b.size(), p.group + ".w.master");
      out.push_back(std::move(b));
    } else if (p.master.allocated() && p.compute.allocated()) {
      take(p.master.view().data, p.master.view().bytes());
    }
    const OptimizerState os = m.options().recipe.moments;
    for (auto [off, disk, codes, scales] :
         {std::tuple{p.host_m, p.disk_m, &p.m, &p.m_scale}, std::tuple{p.host_v, p.disk_v, &p.v, &p.v_scale}}) {
      if (off != Parameter::kDevice) {
        take(m.host_state(off), moment_bytes(os, n));
        continue;
      }
      if (disk != Parameter::kDevice) {  // the host tier's layout: codes, then scales at moment_scale_offset
        std::vector<std::byte> b(moment_bytes(os, n));
        const size_t codes_bytes = os == OptimizerState::q8 ? n : b.size();
        m.read_state_disk(disk, b.data(), codes_bytes, p.group + ".adam");
        if (os == OptimizerState::q8)
          m.read_state_disk(disk + Parameter::disk_scale_offset(n), b.data() + moment_scale_offset(n),
                            quant_blocks(n) * sizeof(float), p.group + ".adam");
        out.push_back(std::move(b));
        continue;
      }
      take(codes->view().data, codes->view().bytes());
      if (scales->allocated()) take(scales->view().data, scales->view().bytes());
    }
  }
  return out;
}

}  // namespace strata::test_util
