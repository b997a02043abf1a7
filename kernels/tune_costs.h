// How many runs the cuda kernels' first-call tuning makes of one problem (kernels/gemm_cuda.cpp,
// kernels/attention_cudnn_cuda.cpp), shared with the sim (kernels/backend_sim.cpp), which forecasts the first
// step's tuning time from them (Forecast::setup_tuning_s). Pure: no CUDA headers.
#pragma once

namespace strata {

// cuBLASLt: the heuristic's top kGemmTuneCandidates algorithms, each run once to warm up and kGemmTuneReps times
// timed, on the first overwriting call of a problem.
constexpr int kGemmTuneCandidates = 8;
constexpr int kGemmTuneReps = 3;
// cuDNN attention: every eligible plan (how many is cuDNN's answer at run time: DeviceProfile's
// attention_tune_candidates_*), each run once to warm up and kAttentionTuneReps times timed, at the call's length or
// its stand-in's (attention_workspace.h, kAttentionTuneMaxT).
constexpr int kAttentionTuneReps = 3;

}  // namespace strata
