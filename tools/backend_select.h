// Backend choice for the tools: "cpu", "cuda", or "auto". The factory lives in the library
// (api/backend_factory.h, strata_api), which links the cuda backend where it is built.
#pragma once
#include "api/backend_factory.h"
#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"  // cuda_device_present() and friends, for tools that call them directly
#endif
