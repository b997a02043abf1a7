// fp8_cast on cpu: engine/fp8.h's quantize.
#include "engine/fp8.h"
#include "kernels/op_dispatch.h"

namespace strata {
// fp8_cast(out, out_t, scale, x; form: Format): either output may be undefined.
void fp8_cast_cpu(const OpCall& c) {
  using namespace dispatch;
  const Tensor &out = c.t[0], &out_t = c.t[1], &sb = c.t[2], &x = c.t[3];
  uint8_t* q = out.defined() ? static_cast<uint8_t*>(out.data) : nullptr;
  uint8_t* qt = out_t.defined() ? static_cast<uint8_t*>(out_t.data) : nullptr;
  if (c.form & fp8::kScaleGiven)
    fp8::encode_all(f32(x), int(rows(x)), int(cols(x)), fp8::form_format(c.form), f32(sb)[fp8::kScale], q, qt);
  else
    fp8::quantize(f32(x), int(rows(x)), int(cols(x)), fp8::form_format(c.form), q, qt, f32(sb));
}
}  // namespace strata
