// Where the running step is, for the progress lines of a long step (model/run/step_watch.h): the tape notes its
// phase and the node it runs as it goes (relaxed atomics, process-wide: a process runs one tape at a time).
#pragma once

namespace strata {

enum class StepPhase : int { idle, forward, backward };

struct StepProgress {
  StepPhase phase = StepPhase::idle;
  int node = 0;   // the node running, 0-based (backward counts down)
  int nodes = 0;  // the tape's nodes
};

void note_step_progress(StepPhase phase, int node, int nodes);
StepProgress step_progress();
const char* step_phase_name(StepPhase p);

}  // namespace strata
