// Backend choice by name, for the library (strata/strata.h's make_backend) and the tools: "cpu",
// "cuda", or "auto" (cuda where this build has it and a GPU is present). Compiled into strata_api,
// the one library that links the cuda backend where it is built, so callers need no build flags.
#pragma once
#include <memory>
#include <string>

#include "engine/backend.h"
#include "model/run/job.h"

namespace strata {

// "auto" -> "cuda" or "cpu"; other names unchanged.
std::string resolve_backend_name(const std::string& name);

// budget 0 = auto: the cuda backend takes the GPU's free memory less headroom; the cpu backend
// reserves 16 GiB of address space (pages are only touched as the arena uses them). ConfigError
// for an unknown name, or "cuda" in a build without the cuda backend.
std::unique_ptr<Backend> make_backend(const std::string& name, size_t budget);

// The run builder's backends and communicators (model/run/job.h): cpu and cuda where built; between
// cuda ranks an UnsupportedError (the installed library carries no NCCL: tools/platform.h adds it).
Platform default_platform();

// Whether this build has the cuda backend.
bool cuda_backend_built();

}  // namespace strata
