// embedding: tokens [N] i32, wte [V, C] -> out [N, C], a row gathered per token; backward adds each token's
// gradient row into dwte (rows no token hit stay zero).
#include "engine/op_scratch.h"
#include "engine/ops/op_common.h"

namespace strata {
namespace ops {
namespace {
using namespace detail;

class EmbeddingOp final : public Op {
 public:
  const char* name() const override { return "embedding"; }
  OpKind kind() const override { return OpKind::embedding; }
  void forward(Backend& be, const OpArgs& a) override { be.embedding_fwd(a.out[0], a.in[0], a.in[1]); }
  void backward(Backend& be, const OpArgs& a) override {
    if (a.gin[1].defined()) be.embedding_bwd(a.gin[1], a.gout[0], a.in[0], a.acc[1]);
  }
  bool saves_input(int i) const override { return i == 0; }
  bool saves_output(int) const override { return false; }
};

}  // namespace

VId embedding(Tape& t, VId tokens, VId wte, std::string cls) {
  const Shape& w = t.value(wte).shape;
  return t.record1(std::make_unique<EmbeddingOp>(), {tokens, wte},
                   {std::move(cls), Shape{t.value(tokens).shape.numel(), w[1]}, act(t)});
}

}  // namespace ops

namespace {
using namespace ops::detail;
// embedding_fwd(out, tokens, wte)
OpKernelBytes embedding_fwd(const OpCall& c) {
  return one(2 * B(c.t[0]) + B(c.t[1]));
}
// embedding_bwd(dwte, dout, tokens): a bf16 dwte (gradients: bf16) adds through compacted fp32 rows of the tokens hit.
ScratchList embedding_scratch(const OpCall& c, OpEnv&) {
  const Tensor &dwte = c.t[0], &tokens = c.t[2];
  if (!c.backward || !dwte.defined() || dwte.dtype != DType::bf16 || tokens.numel() == 0) return {};
  return embedding_grad_scratch(tokens.numel(), dwte.shape[0], dwte.shape[1]);
}
// Both backends zero an overwritten dwte first: the kernel adds rows into it. bf16: clear the map and the rows, mark
// and number the rows, add the tokens' rows, fold each hit row into dwte once.
OpTime embedding_price(const OpCall& c, OpSim& sim) {
  const CostModel& cost = sim.cost();
  if (!c.backward) return {cost.memory(embedding_fwd(c).bytes[0])};
  const Tensor &dwte = c.t[0], &dout = c.t[1], &tokens = c.t[2];
  if (dwte.defined() && !c.acc[0]) sim.zero_first(dwte);
  const double rows_f32 = double(dout.numel()) * 4;
  if (!dwte.defined() || dwte.dtype != DType::bf16 || tokens.numel() == 0)
    return {cost.memory(B(dout) + B(tokens) + 2 * rows_f32), 1, false};
  const double slots = double(embedding_grad_slots(tokens.numel(), dwte.shape[0])), C = cols(dwte);
  const double map = 4.0 * (double(dwte.shape[0]) + slots + 1);
  const double t = cost.memory(map + slots * C * 4) + cost.memory(B(tokens) + map) +
                   cost.memory(B(dout) + B(tokens) + 2 * rows_f32) + cost.memory(slots * C * (4 + 2 * 2));
  return {t, 4, false};
}
}  // namespace

const OpInfo& op_desc::embedding() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::embedding, "embedding",     {grad_rows, grad_row_map}, embedding_fwd,  nullptr,
                        embedding_scratch, "embedding_fwd", "embedding_bwd",           embedding_price};
  return i;
}

}  // namespace strata
