// The per-parameter arrays of a checkpoint's optimizer state (model/run/checkpoint_pieces.h).
#include "model/run/checkpoint_pieces.h"

#include <fmt/format.h>

#include <filesystem>
#include <tuple>

#include "engine/error.h"

namespace strata::checkpoint_detail {

namespace fs = std::filesystem;

void param_pieces(Backend& be, const LlamaModel& m, const Parameter& p, std::vector<Piece>& out) {
  const OptimizerState os = m.options().recipe.moments;
  const DType mdt = os == OptimizerState::fp32 ? DType::f32 : os == OptimizerState::bf16 ? DType::bf16 : DType::u8;
  {
    const size_t n = size_t(p.shape.numel());
    const std::vector<int64_t> shape(p.shape.d.begin(), p.shape.d.begin() + p.shape.nd);
    const std::vector<int64_t> blocks = {int64_t(quant_blocks(n))};
    if (p.page >= 0)  // a trainable paged weight: its compute copy is the pager's host block
      out.push_back({p.name, p.value().dtype, shape, {}, m.pager()->host_data(size_t(p.page))});
    else
      out.push_back({p.name, p.value().dtype, shape, p.value(), nullptr});
    // A split master's low half (bf16 compute weights) is state of its own; an fp32 master beside
    // fp32 compute weights holds the same bits.
    const bool f32 = p.value().dtype == DType::f32;
    const std::string master_name = f32 ? p.name : p.name + ".master";
    if (p.host_master != Parameter::kDevice)
      out.push_back({master_name, f32 ? DType::f32 : be.master_dtype(), shape, {}, m.host_state(p.host_master), f32});
    else if (p.disk_master != Parameter::kDevice)
      out.push_back({master_name,
                     f32 ? DType::f32 : be.master_dtype(),
                     shape,
                     {},
                     nullptr,
                     f32,
                     p.disk_master,
                     &m,
                     p.group + ".w.master"});
    else if (p.master.allocated() && (p.compute.allocated() || p.page >= 0))
      out.push_back({master_name, p.master.view().dtype, shape, p.master.view(), nullptr, f32});
    for (auto [off, disk, codes, scales, tag] : {std::tuple{p.host_m, p.disk_m, &p.m, &p.m_scale, ".m"},
                                                 std::tuple{p.host_v, p.disk_v, &p.v, &p.v_scale, ".v"}}) {
      const std::string nm = p.name + tag;
      if (disk != Parameter::kDevice) {
        const std::string cls = p.group + (tag == std::string(".m") ? ".adam.m" : ".adam.v");
        out.push_back({nm, mdt, shape, {}, nullptr, false, disk, &m, cls});
        if (mdt == DType::u8)
          out.push_back(
              {nm + "_scale", DType::f32, blocks, {}, nullptr, false, disk + Parameter::disk_scale_offset(n), &m, cls});
      } else if (off != Parameter::kDevice) {
        std::byte* h = m.host_state(off);
        out.push_back({nm, mdt, shape, {}, h});
        if (mdt == DType::u8)
          out.push_back({nm + "_scale", DType::f32, blocks, {}, h ? h + moment_scale_offset(n) : nullptr});
      } else {
        out.push_back({nm, mdt, shape, codes->view(), nullptr});
        if (mdt == DType::u8) out.push_back({nm + "_scale", DType::f32, blocks, scales->view(), nullptr});
      }
    }
  }
}

std::string shard_name(int rank, int world) {
  return fmt::format("optimizer.rank-{}-of-{}.safetensors", rank, world);
}

void agree(const RankSum& sum, const std::string& err, const std::string& where, const std::string& what, int world) {
  const float failed = sum(err.empty() ? 0.0f : 1.0f);
  if (failed > 0)
    throw IoError(fmt::format("{}: {} of {} ranks could not {}{}", where, int(failed), world, what,
                              err.empty() ? std::string() : "; this rank: " + err),
                  where);
}

std::string current_error(const std::string& final_dir) {
  try {
    throw;
  } catch (const fs::filesystem_error& e) {
    return fmt::format("{}: {}", final_dir, e.what());
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace strata::checkpoint_detail
