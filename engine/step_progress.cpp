#include "engine/step_progress.h"

#include <atomic>

namespace strata {

namespace {
std::atomic<int> g_phase{int(StepPhase::idle)}, g_node{0}, g_nodes{0};
}  // namespace

void note_step_progress(StepPhase phase, int node, int nodes) {
  g_nodes.store(nodes, std::memory_order_relaxed);
  g_node.store(node, std::memory_order_relaxed);
  g_phase.store(int(phase), std::memory_order_relaxed);
}

StepProgress step_progress() {
  return {StepPhase(g_phase.load(std::memory_order_relaxed)), g_node.load(std::memory_order_relaxed),
          g_nodes.load(std::memory_order_relaxed)};
}

const char* step_phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::forward:
      return "forward";
    case StepPhase::backward:
      return "backward";
    case StepPhase::idle:
      break;
  }
  return "between passes";
}

}  // namespace strata
