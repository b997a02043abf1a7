// The FP8 casts on cuda (kernels/fp8.cu): what linear_fp8's cuda implementation runs besides its GEMMs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/fp8.h"

namespace strata::cuda {

// The codes of x [rows, cols] (bf16) in format f, scaled by its current amax: out [rows, cols] and/or out_t
// [cols, rows] (either may be null) and the scale block sb (fp8::kScaleFloats floats). `partial` is scratch of
// kFp8AmaxBlocks floats (engine/op_scratch.h). rows and cols multiples of fp8::kDimMultiple, x 16-byte aligned;
// Error otherwise. Two kernels: the amax's partial maxima, then the codes (each block folds the partials). With
// `scale_given`, sb already holds x's block: the codes kernel alone, at sb's scale (sb is not written).
void fp8_quantize(const __nv_bfloat16* x, int64_t rows, int64_t cols, fp8::Format f, uint8_t* out, uint8_t* out_t,
                  float* sb, float* partial, cudaStream_t s, bool scale_given = false);

}  // namespace strata::cuda
