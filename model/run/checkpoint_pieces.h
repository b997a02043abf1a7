// The per-parameter arrays a training checkpoint's optimizer state holds (model/run/checkpoint.h), and what
// its save (checkpoint.cpp) and its load (checkpoint_load.cpp) share. Internal to those files.
#pragma once
#include <string>
#include <vector>

#include "engine/backend.h"
#include "model/llama/llama.h"
#include "model/run/checkpoint.h"

namespace strata::checkpoint_detail {

inline constexpr const char* kState = "trainer_state.json";
inline constexpr const char* kConfig = "train_config.json";
inline constexpr const char* kOptimizer = "optimizer.safetensors";

// One array of a trainable parameter's state: on the device (`dev`), in the host tier (`host`) or in
// the model's state file on the disk tier (`disk`: its offset there, read and written through
// `model`, errors naming the state class `cls`).
struct Piece {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Tensor dev;
  std::byte* host = nullptr;
  // A second copy of the weights (an fp32 master on the host tier beside its fp32 compute copy on
  // an f32 backend): not saved, filled from the weights' tensor, so a checkpoint does not depend
  // on the tier its state lived in.
  bool mirror = false;
  size_t disk = Parameter::kDevice;
  const LlamaModel* model = nullptr;
  std::string cls = {};
  size_t bytes() const {
    size_t n = 1;
    for (int64_t d : shape) n *= size_t(d);
    return n * dtype_size(dtype);
  }
};

// The state of one trainable parameter (its weights first), appended to `out`. The names depend on the
// parameter and the recipe only, never on the rank count: that is what lets a checkpoint reshard.
void param_pieces(Backend& be, const LlamaModel& m, const Parameter& p, std::vector<Piece>& out);

// A rank's optimizer-state file with ZeRO-1/2 over `world` ranks: optimizer.rank-<rank>-of-<world>.safetensors.
std::string shard_name(int rank, int world);

// ZeRO-1: each rank's agreement on whether every rank got through a phase. Every rank calls it with
// whether it failed; if any did, every rank throws (an IoError naming the checkpoint and how many ranks
// failed, with this rank's own error where it has one).
void agree(const RankSum& sum, const std::string& err, const std::string& where, const std::string& what, int world);

// The message of the exception in flight (inside a catch); a filesystem error names `final_dir`.
std::string current_error(const std::string& final_dir);

}  // namespace strata::checkpoint_detail
