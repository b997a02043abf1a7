// The strided block copy (engine/op_params.h BlockCopy): the cpu reference.
#pragma once
#include "engine/op_params.h"

namespace strata {

namespace cpu {
void block_copy(float* out, const float* in, const BlockCopy& c, bool accumulate);
}  // namespace cpu

}  // namespace strata
