// How the cpu reference kernels write a gradient element: added into it, or, at its first write
// in a step, overwritten with 0 + v. That is the value zeroing it first and adding gave, bit for
// bit (-0 becomes +0), so a step gives the same bits whichever way it is asked.
#pragma once

namespace strata::cpu {

inline void write_grad(float& g, float v, bool accumulate) {
  g = (accumulate ? g : 0.0f) + v;
}

}  // namespace strata::cpu
