#include "model/llama/slot_classes.h"

namespace strata {

const PresetClasses& llama_preset_classes() {
  static const PresetClasses c = {
      .loss_inputs = {"final_norm.*", "loss.*"},
      .layer = "L*",
      .layer_input = "L*.input",
      .cheap = {"L*.attn_norm.out", "L*.mlp_norm.out", "L*.mlp.act"},
  };
  return c;
}

}  // namespace strata
