// The Llama model's saved-slot classes by the roles the engine's activation presets name
// (engine/plan.h PresetClasses): layer n's slots are "L<n>.<slot>" (llama_forward.cpp records them),
// the loss path's are "final_norm.*" and "loss.*".
#pragma once
#include "engine/plan.h"

namespace strata {

const PresetClasses& llama_preset_classes();

}  // namespace strata
