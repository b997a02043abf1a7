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
}  // namespace

const OpInfo& op_desc::embedding() {
  using namespace scratch_tag;
  static const OpInfo i{OpKind::embedding, "embedding", {grad_rows, grad_row_map}, embedding_fwd};
  return i;
}

}  // namespace strata
