// Trains a tiny Llama for a few steps on the cpu backend through strata's public API: writes its
// own checkpoint and token file (./strata_tiny), trains, prints the losses, saves. No arguments.
#include <strata/strata.h>

#include <cstdio>

int main() {
  try {
    const std::string dir = "strata_tiny";  // in the current directory
    strata::ModelShape shape;               // 2 layers, hidden 64, vocab 256
    const std::string tokens = strata::write_tiny_checkpoint(dir, shape, /*seed=*/0, /*tokens=*/20000);
    std::printf("strata %s: tiny checkpoint in %s\n", strata::version(), dir.c_str());

    strata::SessionConfig cfg;
    cfg.model_dir = dir;
    cfg.data_path = tokens;
    cfg.seq = 64;
    cfg.batch = 4;
    cfg.lr = 3e-3f;
    cfg.steps = 20;  // max_steps: the loop's length (its schedule and its end)
    strata::Session session(strata::make_backend("cpu"), cfg);
    std::printf("%zu parameters on %s (arena %zu bytes)\n", session.parameters(),
                session.device().description().c_str(), session.device().arena_budget_bytes());

    float first = 0, last = 0;
    session.on_step([&](const strata::StepMetrics& m) {
      if (m.step == 1) first = m.loss;
      last = m.loss;
      std::printf("step %2d | loss %.4f | grad norm %.3f | %.0f tok/s\n", m.step, double(m.loss), double(m.grad_norm),
                  m.tokens_per_s);
    });
    for (int i = 0; i < cfg.steps; ++i)
      if (session.step().diverged()) return 1;
    session.save(dir + "/trained");
    std::printf("loss %.4f -> %.4f; saved to %s/trained\n", double(first), double(last), dir.c_str());
    return last < first ? 0 : 1;  // a few steps on the synthetic stream must lower the loss
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "train_tiny: %s\n", e.what());
    return 1;
  }
}
