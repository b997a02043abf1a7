#include "model/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace strata {

namespace {

std::string describe(const PlanSpec& s) {
  if (s.checkpoint_every > 0)
    return s.checkpoint_every == 1 ? "gradient checkpointing"
                                   : fmt::format("gradient checkpointing every {} layers", s.checkpoint_every);
  std::string out;
  if (!s.recompute_types.empty()) {
    out = "recompute ";
    for (size_t i = 0; i < s.recompute_types.size(); ++i) out += (i ? ", " : "") + s.recompute_types[i];
  }
  if (s.checkpointed_layers > 0)
    out +=
        fmt::format("{}checkpoint {}", out.empty() ? "" : " + ",
                    s.checkpointed_layers == 1 ? std::string("L0") : fmt::format("L0-L{}", s.checkpointed_layers - 1));
  return out.empty() ? "keep everything" : out;
}

struct Search {
  const ForecastRequest& base;
  size_t budget;
  int layers;
  PlanResult& res;
  std::map<std::string, PlanTried> cache;
  std::map<std::string, PlanSpec> specs;
  bool have_best = false;
  PlanTried best;

  PlanTried eval(const PlanSpec& s) {
    const std::string label = describe(s);
    if (auto it = cache.find(label); it != cache.end()) return it->second;
    ForecastRequest r = base;
    r.plan = make_plan(s, layers);
    r.budget = 0;  // the in-use peak does not depend on the budget; fitting does (placement)
    Forecast f = forecast(r);
    res.sim_runs++;
    PlanTried t{label, f.peak_bytes, f.high_water_bytes, f.step_s, false};
    if (f.fits && f.peak_bytes <= budget) {
      r.budget = budget;
      Forecast fb = forecast(r);
      res.sim_runs++;
      t.fits = fb.fits;
      if (fb.fits) t.high_water_bytes = fb.high_water_bytes;
      if (fb.fits &&
          (!have_best || t.step_s < best.step_s || (t.step_s == best.step_s && t.peak_bytes < best.peak_bytes))) {
        have_best = true;
        best = t;
        res.plan = r.plan;
        res.label = label;
        res.forecast = std::move(fb);
      }
    }
    cache[label] = t;
    specs[label] = s;
    res.tried.push_back(t);
    return t;
  }

  // Fewest checkpointed layers that make `types` fit (bisection: memory falls as n grows).
  void checkpointed(const std::vector<std::string>& types) {
    if (eval({types, 0, 0}).fits) return;  // no layer needs checkpointing
    PlanSpec s{types, layers, 0};
    if (!eval(s).fits) return;
    int lo = 1, hi = layers;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      s.checkpointed_layers = mid;
      if (eval(s).fits)
        hi = mid;
      else
        lo = mid + 1;
    }
  }
};

}  // namespace

Plan make_plan(const PlanSpec& s, int layers) {
  if (s.checkpoint_every > 0) return Plan::gradient_checkpointing(s.checkpoint_every);
  Plan p;
  p.preset = "auto: " + describe(s);
  for (int i = 0; i < std::min(s.checkpointed_layers, layers); ++i) {
    p.overrides.emplace_back(fmt::format("L{}.input", i), Decision::keep);
    p.overrides.emplace_back(fmt::format("L{}.*", i), Decision::recompute);
  }
  for (auto& t : s.recompute_types) p.overrides.emplace_back(t, Decision::recompute);
  return p;
}

PlanResult plan_for_budget(const ForecastRequest& base, size_t budget) {
  PlanResult res;
  res.budget = budget;
  const int L = base.model.num_hidden_layers;
  Search S{base, budget, L, res, {}, {}, false, {}};

  // The saved class types of this model and mode (the loss path stays kept: it is needed at once).
  ForecastRequest keep = base;
  keep.plan = Plan::keep_everything();
  keep.budget = 0;
  Forecast kf = forecast(keep);
  res.sim_runs++;
  res.persistent_bytes = kf.persistent_bytes;
  std::vector<std::string> types;
  for (auto& row : kf.plan_rows)
    if (row.cls.rfind("L*.", 0) == 0) types.push_back(row.cls);

  // 1. Greedy over class types.
  std::vector<std::string> chosen;
  PlanTried cur = S.eval({chosen, 0, 0});
  std::vector<std::vector<std::string>> prefixes{chosen};
  if (cur.fits) {  // keep-everything fits: nothing is faster
    res.found = true;
    return res;
  }
  while (!cur.fits) {
    double best_score = -1;
    std::string best_type;
    PlanTried best_t;
    for (auto& t : types) {
      if (std::find(chosen.begin(), chosen.end(), t) != chosen.end()) continue;
      std::vector<std::string> s = chosen;
      s.push_back(t);
      PlanTried tr = S.eval({s, 0, 0});
      if (tr.peak_bytes >= cur.peak_bytes) continue;
      const double saved = double(cur.peak_bytes - tr.peak_bytes);
      const double score = saved / std::max(tr.step_s - cur.step_s, 1e-9);
      if (score > best_score) best_score = score, best_type = t, best_t = tr;
    }
    if (best_score < 0) break;
    chosen.push_back(best_type);
    cur = best_t;
    prefixes.push_back(chosen);
  }
  // 2. Checkpointed layers on top of every greedy prefix, and on selective recompute's classes
  //    (so the result is never slower than a preset that fits).
  std::vector<std::string> selective;
  for (const char* t : {"L*.attn_norm.out", "L*.mlp_norm.out", "L*.mlp.act"})
    if (std::find(types.begin(), types.end(), t) != types.end()) selective.push_back(t);
  if (!selective.empty()) S.checkpointed(selective);
  for (auto& p : prefixes) S.checkpointed(p);
  // 3. Gradient checkpointing every k layers.
  for (int k = 1; k <= std::max(1, L); k *= 2) S.eval({{}, 0, k});

  res.found = S.have_best;
  if (res.found) return res;
  // Nothing fits: the lowest-memory candidate and the budget it needs, verified by a sim run.
  const PlanTried* low = nullptr;
  for (auto& t : res.tried)
    if (!low || t.high_water_bytes < low->high_water_bytes) low = &t;
  ForecastRequest r = base;
  r.plan = make_plan(S.specs.at(low->label), L);
  res.plan = r.plan;
  res.label = low->label;
  size_t need = low->high_water_bytes;
  for (int i = 0; i < 20; ++i) {  // placement under a tighter budget can differ: grow until it fits
    r.budget = need;
    Forecast f = forecast(r);
    res.sim_runs++;
    if (f.fits) {
      res.forecast = std::move(f);
      break;
    }
    need += std::max<size_t>(need / 100, size_t(1) << 20);
  }
  res.minimum_bytes = need;
  return res;
}

std::string plan_yaml(const ForecastRequest& r, const Plan& plan, const Forecast& f, size_t budget) {
  std::string y;
  y +=
      fmt::format("# strata-plan: {} layers, hidden {}, seq {} x batch {}, {} training, sim mirroring the {} backend\n",
                  r.model.num_hidden_layers, r.model.hidden_size, r.seq, r.batch, train_mode_name(r.mode),
                  sim_mirror_name(r.mirror));
  y +=
      fmt::format("# profile: {} ({})\n", r.profile.name,
                  r.profile.source.rfind("datasheet", 0) == 0 ? "datasheet/anchors, not calibrated" : r.profile.source);
  y += fmt::format("# forecast: arena peak {} (high-water {}) under a budget of {}; step {:.4f} s, {:.0f} tokens/s\n",
                   format_bytes(f.peak_bytes), format_bytes(f.high_water_bytes), format_bytes(budget), f.step_s,
                   f.tokens_per_s);
  y += fmt::format("# plan: {}\n", plan.preset);
  y += fmt::format("sequence_len: {}\nmicro_batch_size: {}\nloss_chunk_tokens: {}\n", r.seq, r.batch,
                   r.loss_chunk_tokens);
  if (budget) y += fmt::format("device_memory: {}  # {}\n", budget, format_bytes(budget));
  if (r.mode == TrainMode::frozen) y += "freeze_base: true\n";
  if (r.mode == TrainMode::lora) y += fmt::format("lora_r: {}\nlora_alpha: {}\n", r.lora_rank, r.lora_alpha);
  if (r.layer_offloading) y += "layer_offloading: true\n";
  static const std::string kOffload = "activation_offloading: ";
  if (plan.preset.rfind(kOffload, 0) == 0 && plan.overrides.empty()) {  // the preset itself (legacy's sync included)
    y += plan.preset + "\n";
    return y;
  }
  std::vector<std::pair<std::string, Decision>> table = plan.overrides;
  if (plan.checkpoint_every > 0) {
    y += plan.checkpoint_every == 1 ? "gradient_checkpointing: true\n"
                                    : fmt::format("gradient_checkpointing: {{every: {}}}\n", plan.checkpoint_every);
  } else if (plan.preset == "selective_recompute") {
    y += "selective_recompute: true\n";
  } else {
    table.insert(table.end(), plan.rules.begin(), plan.rules.end());
  }
  if (table.empty()) {
    y += plan.checkpoint_every > 0 || plan.preset == "selective_recompute" ? "" : "plan: {}  # keep everything\n";
    return y;
  }
  y += "plan:\n";
  for (auto& [pat, d] : table) y += fmt::format("  \"{}\": {}\n", pat, decision_name(d));
  return y;
}

}  // namespace strata
