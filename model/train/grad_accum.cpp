#include "model/train/grad_accum.h"

#include <algorithm>
#include <cstring>

namespace strata {

void GradAccumulator::add(size_t i, size_t k, float w) {
  auto& params = model_.params();
  acc_.resize(params.size());
  const bool last = i + 1 == k;
  for (size_t j = 0; j < params.size(); ++j) {
    Parameter& p = params[j];
    if (!p.trainable) continue;
    const size_t n = size_t(p.shape.numel());
    std::vector<float>& acc = acc_[j];
    if (i == 0) {
      acc.resize(n);
      opt_.download_grad(p, acc.data());
      for (size_t e = 0; e < n; ++e) acc[e] = w * acc[e];
      continue;
    }
    scratch_.resize(n);
    opt_.download_grad(p, scratch_.data());
    if (!last) {
      for (size_t e = 0; e < n; ++e) acc[e] = acc[e] + w * scratch_[e];
      continue;
    }
    for (size_t e = 0; e < n; ++e) scratch_[e] = acc[e] + w * scratch_[e];
    // The sum is rounded once into a bf16 gradient (gradients: bf16).
    if (p.host_grad == Parameter::kDevice)
      be_.upload_f32(p.grad.view(), scratch_.data());
    else if (std::byte* h = model_.host_state(p.host_grad))
      convert_from_f32(h, model_.grad_dtype(), scratch_.data(), n);  // download_grad waited for the copies into it
  }
  if (last) renorm();
}

void GradAccumulator::renorm() {
  // The squared norm again, over the summed gradients in parameter order. A host-tier gradient is
  // uploaded through one bounded device buffer to be measured.
  const Tensor norm = opt_.norm_sq();
  be_.zero(norm);
  size_t host_max = 0;
  for (const Parameter& p : model_.params())
    if (p.trainable && p.host_grad != Parameter::kDevice) host_max = std::max(host_max, size_t(p.shape.numel()));
  Buffer stage;
  const size_t chunk = std::min(host_max, size_t(1) << 22);
  if (chunk) stage = Buffer(be_.arena(), model_.grad_dtype(), Shape{int64_t(chunk)}, "grad_accum.norm");
  for (const Parameter& p : model_.params()) {
    if (!p.trainable) continue;
    if (p.host_grad == Parameter::kDevice) {
      be_.grad_norm_sq(norm, p.grad.view());
      continue;
    }
    const std::byte* h = model_.host_state(p.host_grad);
    if (!h) continue;  // the sim backend keeps no bytes
    const size_t n = size_t(p.shape.numel()), elem = dtype_size(model_.grad_dtype());
    for (size_t b = 0; b < n; b += chunk) {
      // The host array's own bytes (bf16 ones as they are: the norm reads them widened, exactly).
      const Tensor part(stage.view().data, model_.grad_dtype(), Shape{int64_t(std::min(chunk, n - b))});
      be_.copy_wait_host(be_.copy_to_device_async(part, h + b * elem));
      be_.grad_norm_sq(norm, part);
    }
  }
}

}  // namespace strata
