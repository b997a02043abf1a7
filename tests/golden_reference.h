// The Hugging Face golden references in tests/golden (made by make_golden.py): the batch and
// the reference tensors, shared by the cpu and gpu golden tests.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/dtype.h"
#include "io/safetensors.h"
#include "model/train/trainer.h"

namespace strata::golden {

inline std::string dir(const std::string& name) {
  return std::string(STRATA_TEST_DATA) + "/golden/" + name;
}

// A reference tensor as float32 (empty, with a test failure, when it is missing).
inline std::vector<float> tensor(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << "reference lacks " << name;
  if (!t) return {};
  size_t n = 1;
  for (auto d : t->shape) n *= size_t(d);
  std::vector<float> out(n);
  convert_to_f32(out.data(), f.data(*t), t->dtype, n);
  return out;
}

// The reference batch. HF shifts labels inside the model: position t predicts token t+1 and the
// last position is ignored.
inline Batch batch(const io::SafetensorsFile& f) {
  Batch b;
  const io::TensorInfo* ids_info = f.find("input_ids");
  EXPECT_NE(ids_info, nullptr) << "reference lacks input_ids";
  if (!ids_info) return b;
  b.B = int(ids_info->shape[0]);
  b.T = int(ids_info->shape[1]);
  const int32_t* ids = reinterpret_cast<const int32_t*>(f.data(*ids_info));
  for (int r = 0; r < b.B; ++r)
    for (int t = 0; t < b.T; ++t) {
      b.inputs.push_back(ids[r * b.T + t]);
      b.targets.push_back(t + 1 < b.T ? ids[r * b.T + t + 1] : -100);
    }
  return b;
}

}  // namespace strata::golden
