#include "model/plan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

#include "engine/error.h"
#include "model/llama/seq_parallel.h"
#include "model/plan/planner_search.h"

namespace strata {

std::string layout_name(const Layout& l, int gpus) {
  const int dp = gpus / std::max(1, l.sequence_parallel);
  const std::string zero = l.zero_stage ? fmt::format("ZeRO-{}", l.zero_stage) : std::string("no ZeRO");
  if (l.sequence_parallel <= 1) return fmt::format("data parallel {}, {}", dp, zero);
  return fmt::format("sequence parallel {} x data parallel {}, {}", l.sequence_parallel, dp, zero);
}

namespace {

// Why `sp` ranks cannot share base's rows (empty: they can).
std::string seq_parallel_refusal(const ForecastRequest& base, int sp) {
  if (sp <= 1) return "";
  try {
    seq_parallel_kv_heads(base.model, sp);
    if (base.seq > 0) check_seq_parallel_len(base.seq, sp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

size_t planner_detail::floor_peak(const ForecastRequest& r, const TierBudgets& budgets, int& runs, int rank,
                                  bool page) {
  const int L = r.model.num_hidden_layers;
  const Plan* fixed = r.plan.places_state() ? &r.plan : nullptr;
  ForecastRequest f = r;
  f.budget = 0;
  f.detail = false;  // the peak alone
  f.rank = rank;
  if (f.mlp_tiles == 0)
    if (const std::vector<int> t = mlp_tile_candidates(r); !t.empty()) f.mlp_tiles = t.back();
  PlanSpec lean;
  if (budgets.host) {
    lean.state_level = planner_detail::state_levels(r).back();  // the most the search may move
    if (page && (r.mode != TrainMode::full || r.zero_stage < 1)) lean.layer_weights = Decision::page;
  } else if (budgets.disk) {
    lean.state_level = "master";
    lean.state_tier = Decision::disk;
  }
  std::vector<PlanSpec> specs(1, lean);
  specs[0].checkpoint_every = 1;
  for (auto [d, budget] : {std::pair{Decision::host, budgets.host}, std::pair{Decision::disk, budgets.disk}})
    if (budget) {
      specs.push_back(lean);
      specs.back().types = {{"L*.input", d}, {"L*", Decision::recompute}};
      specs.push_back(lean);
      specs.back().types = {{"L*", d}};
    }
  size_t low = std::numeric_limits<size_t>::max();
  for (const PlanSpec& s : specs) {
    if (planner_detail::out_of_time()) break;
    f.plan = make_plan(s, L, fixed);
    low = std::min(low, forecast(f).peak_bytes);
    runs++;
    planner_detail::search_progress(1);
  }
  return low;
}

namespace {

// Adds the wall seconds of its scope to `s` (a layout's search time).
struct Stopwatch {
  double& s;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~Stopwatch() { s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

// a is the better answer: faster per token, then the smaller device peak.
bool better(double tps_a, size_t peak_a, double tps_b, size_t peak_b) {
  return tps_a > tps_b || (tps_a == tps_b && peak_a < peak_b);
}

}  // namespace

LayoutChoice plan_layout(const ForecastRequest& base, const TierBudgets& budgets, int fixed_sp, int fixed_zero,
                         bool exhaustive) {
  if (base.gpus < 2) throw ConfigError("a layout of GPUs needs at least 2 (--gpus)", "command line", "gpus");
  planner_detail::SearchClock clock(base);  // one time limit for every layout
  LayoutChoice out;
  // Every layout the model allows, with keep everything's forecast: its tokens/s bound no plan of it exceeds.
  struct Cand {
    LayoutTried t;
    double tokens_per_step = 0;
    size_t keep_peak = 0;
    size_t persistent = 0;   // keep everything's bytes in use before the step (its weights and state, a rank's)
    size_t floor = 0;        // its lowest-memory plans' device peak (step 1)
    size_t kept_floor = 0;   // the same of its plans that keep the layers' weights (without ZeRO; else floor)
    double zero_comm_s = 0;  // fits: its plan's collectives besides the all-to-alls, busy seconds a step
    double step_s = 0;       // fits: its plan's step
  };
  std::vector<Cand> cands;
  std::vector<LayoutTried> refused;
  for (int sp = 1; sp <= base.gpus; ++sp) {
    if (base.gpus % sp || (fixed_sp > 0 && sp != fixed_sp)) continue;
    const std::string no = seq_parallel_refusal(base, sp);
    for (int z = 0; z <= 3; ++z) {
      if (fixed_zero >= 0 && z != fixed_zero) continue;
      LayoutTried t;
      t.layout = {sp, z};
      if (!no.empty()) {
        t.status = "not possible: " + no;
        refused.push_back(std::move(t));
        continue;
      }
      ForecastRequest r = base;
      r.sequence_parallel = sp;
      r.zero_stage = z;
      r.budget = 0;
      r.detail = false;  // its peak and speed alone
      r.mlp_tiles = std::max(1, base.mlp_tiles);
      try {
        const Forecast f = forecast(r);
        out.sim_runs++;
        planner_detail::search_progress(1);
        Cand c{t, f.tokens_per_s * f.step_s, f.peak_bytes, f.persistent_bytes};
        c.t.bound_tokens_per_s = f.tokens_per_s;
        cands.push_back(std::move(c));
      } catch (const Error& e) {  // a combination the engine refuses (the message says which)
        t.status = fmt::format("not possible: {}", e.what());
        refused.push_back(std::move(t));
      }
    }
  }
  if (cands.empty())
    throw ConfigError(fmt::format("no layout of {} GPUs runs this model: {}", base.gpus,
                                  refused.empty() ? std::string("none was given") : refused.front().status),
                      "command line", "gpus");
  // The lowest-memory layouts first (they fit most often, and what they find bounds the rest), then the faster.
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.keep_peak != b.keep_peak ? a.keep_peak < b.keep_peak : a.t.bound_tokens_per_s > b.t.bound_tokens_per_s;
  });
  const Cand* best = nullptr;
  auto take = [&](Cand& c, PlanResult& pr) {
    LayoutTried& t = c.t;
    t.sim_runs += pr.sim_runs;
    out.sim_runs += pr.sim_runs;
    if (!pr.found) return;
    t.fits = true;
    t.status = "fits";
    t.tokens_per_s = pr.forecast.tokens_per_s;
    c.zero_comm_s = std::max(0.0, pr.forecast.comm_busy_s - pr.forecast.all_to_all_s);
    c.step_s = pr.forecast.step_s;
    t.peak_bytes = pr.forecast.peak_bytes;
    t.label = pr.label;
    if (!best || better(t.tokens_per_s, t.peak_bytes, best->t.tokens_per_s, best->t.peak_bytes)) {
      best = &c;
      out.plan = std::move(pr);
    }
  };
  auto request = [&](const Cand& c) {
    ForecastRequest r = base;
    r.sequence_parallel = c.t.layout.sequence_parallel;
    r.zero_stage = c.t.layout.zero_stage;
    return r;
  };
  // A full fine-tune without ZeRO may page its layers' weights from the host, which ZeRO-3 cannot (dominated_by).
  auto pages_alone = [&](const Cand& c) {
    return c.t.layout.zero_stage == 0 && base.mode == TrainMode::full && budgets.host > 0 && !exhaustive;
  };
  // 1. Which layouts fit at all: the lowest-memory plans' device peak, then a first-fit search (so a plan is
  //    known early, even when the time limit cuts the rest short). The coarse first-fit pass (the low-memory
  //    families and the state placed per layer under them) asks each layout first; the whole first-fit search
  //    then asks those it found nothing in, but only once some layout fits: when none does by the coarse pass,
  //    nothing is taken to fit (the whole search of one 8B layout at 4M tokens alone runs some 2,500 sims, a
  //    minute on 2 cores), as max_seq_for_budget takes a coarse "no" at the lengths it bisects.
  std::vector<Cand*> open, maybe, undecided;
  for (Cand& c : cands) {
    LayoutTried& t = c.t;
    t.status = "not searched: the time limit had passed";
    if (planner_detail::out_of_time()) continue;
    int runs = 0;
    Stopwatch sw{t.search_s};
    const size_t low = planner_detail::floor_peak(request(c), budgets, runs);
    c.floor = c.kept_floor = low;
    if (pages_alone(c)) c.kept_floor = planner_detail::floor_peak(request(c), budgets, runs, 0, false);
    t.sim_runs += runs;
    out.sim_runs += runs;
    if (planner_detail::floor_excludes(low, budgets.device))
      t.status = fmt::format("nothing fits: its lowest-memory plans need {} of device memory", format_bytes(low));
    else
      maybe.push_back(&c);
  }
  // `bound_s`: only plans faster than this matter (a layout slower than the best found cannot be the answer);
  // `paged_only`: only its plans that page the layers' weights (the others are dominated, below).
  auto first_fit = [&](Cand& c, bool coarse, double bound_s, bool paged_only = false) {
    LayoutTried& t = c.t;
    if (planner_detail::out_of_time()) return;
    Stopwatch sw{t.search_s};
    planner_detail::Goal goal{false, true};
    goal.coarse = coarse;
    goal.bound_s = bound_s;
    goal.paged_only = paged_only;
    PlanResult pr = planner_detail::plan_for_goal(request(c), budgets, goal);
    if (!pr.found)
      t.status = planner_detail::search_stopped() ? "not decided by the time limit"
                 : coarse ? "nothing fits: not in its low-memory families (the coarse pass; no layout fit there)"
                 : bound_s < std::numeric_limits<double>::infinity() ? "no plan faster than the best found fits"
                                                                     : "nothing fits";
    take(c, pr);
    if (t.fits)
      open.push_back(&c);
    else if (coarse && !planner_detail::search_stopped())
      undecided.push_back(&c);
  };
  constexpr double kAny = std::numeric_limits<double>::infinity();
  for (Cand* c : maybe) first_fit(*c, !exhaustive, kAny);
  // A lower ZeRO stage at the same sequence-parallel degree as a ZeRO-3 layout that fits computes the same step and
  // holds more a rank. When its lowest-memory plans also need more than ZeRO-3's, a plan that fits it fits ZeRO-3 as
  // well, where it runs no slower than its own step plus ZeRO-3's gathers; so it can beat ZeRO-3's fastest plan (and
  // so the answer) by at most ZeRO-3's collectives besides the all-to-alls. When those are under kDominated of ZeRO-3's
  // step (an 8B at millions of tokens: a tenth of a second in an hour), the lower stage is not searched further.
  // `exhaustive` searches it all the same.
  // Without ZeRO the same holds, except that a full fine-tune may page its weights there, which ZeRO-3 cannot: a
  // paged plan need not fit ZeRO-3, so such a layout is searched for its paged plans alone (paged_only below).
  // With a host or disk tier the same plan's state moves differently: a lower stage may hide its streamed update in
  // the next forward where ZeRO-3's shows (a 3B at 131,072 on 2 GPUs, the state on the host: 0.28 s of a 12.4 s
  // step), so ZeRO-3's whole share of the weights and state moved both ways over the slowest tier is counted too.
  constexpr double kDominated = 0.01;
  auto state_moves_s = [&](const Cand& d) {
    const DeviceProfile& p = base.profile;
    double s = 0;
    if (budgets.host && p.h2d_gbps > 0 && p.d2h_gbps > 0) s = 1 / p.h2d_gbps + 1 / p.d2h_gbps;
    if (budgets.disk && p.disk_read_gbps > 0 && p.disk_write_gbps > 0)
      s = std::max(s, 1 / p.disk_read_gbps + 1 / p.disk_write_gbps);
    return double(d.persistent) * 1e-9 * s;
  };
  auto lower_stage_saves_s = [&](const Cand& d) { return d.zero_comm_s + state_moves_s(d); };
  auto dominated_by = [&](const Cand& c) -> const Cand* {
    if (exhaustive || c.t.layout.zero_stage > 2) return nullptr;
    for (const Cand& d : cands)
      if (d.t.fits && d.t.layout.zero_stage == 3 && d.t.layout.sequence_parallel == c.t.layout.sequence_parallel &&
          d.floor <= c.kept_floor && lower_stage_saves_s(d) <= kDominated * d.step_s)
        return &d;
    return nullptr;
  };
  auto dominance = [&](const Cand& d, const Cand& c) {
    return fmt::format(
        "ZeRO-3 holds less at this degree, its lowest-memory plans {} against {}{}, and its collectives besides the "
        "all-to-alls take {:.2f} s of its {:.0f} s step and its share of the weights and state {:.2f} s both ways "
        "over the slowest tier: the most a lower stage could save",
        format_bytes(d.floor), format_bytes(c.kept_floor), pages_alone(c) ? " unpaged" : "", d.zero_comm_s, d.step_s,
        state_moves_s(d));
  };
  if (best)
    for (Cand* c : undecided) {
      if (planner_detail::out_of_time()) {
        c->t.status = "not decided by the time limit";
      } else if (!better(c->t.bound_tokens_per_s, 0, best->t.tokens_per_s, best->t.peak_bytes)) {
        c->t.status = "not searched: keeping everything is not faster than the best found";
      } else if (const Cand* d = dominated_by(*c); d && !pages_alone(*c)) {
        c->t.status = fmt::format("not searched past the coarse pass: {}", dominance(*d, *c));
      } else if (d) {
        first_fit(*c, false, c->tokens_per_step / best->t.tokens_per_s, true);
        if (!c->t.fits && !planner_detail::search_stopped())
          c->t.status = fmt::format("no paged plan faster than the best found fits; its unpaged plans not searched: {}",
                                    dominance(*d, *c));
      } else {
        first_fit(*c, false, c->tokens_per_step / best->t.tokens_per_s);
      }
    }
  // 2. The fastest plan of each layout that fits, the likeliest fastest first (its plan is the tightest bound for the
  //    others, and the answer when the time limit cuts the rest short): the layouts whose first fit is within
  //    kFirstFitTie of the fastest first fit, the lowest first-fit peak first, then the rest, the fastest bound
  //    first. First fits are low-memory plans that recompute nearly everything, so their speeds nearly tie; what
  //    tells the layouts' fastest plans apart is the memory left to keep activations in, which a lower peak leaves
  //    (an 8B at 1,048,576 on 4 GPUs: sequence parallel 2 x 2's first fit was 0.1% faster than 4's, but 4's peak
  //    was 40 GiB against 73, and its fastest plan 2,009 tokens/s against 1,733). A layout whose keep-everything
  //    step cannot beat the best found is not searched, and each search looks only for plans faster than it.
  constexpr double kFirstFitTie = 0.02;
  const double tie_tps = best ? best->t.tokens_per_s * (1 - kFirstFitTie) : 0.0;
  std::stable_sort(open.begin(), open.end(), [&](const Cand* a, const Cand* b) {
    const bool ta = a->t.tokens_per_s >= tie_tps, tb = b->t.tokens_per_s >= tie_tps;
    if (ta != tb) return ta;
    if (ta && a->t.peak_bytes != b->t.peak_bytes) return a->t.peak_bytes < b->t.peak_bytes;
    if ((a == best) != (b == best)) return a == best;
    return a->t.bound_tokens_per_s > b->t.bound_tokens_per_s;
  });
  for (Cand* c : open) {
    if (c != best && !better(c->t.bound_tokens_per_s, 0, best->t.tokens_per_s, best->t.peak_bytes)) continue;
    if (planner_detail::out_of_time()) break;
    const Cand* d = c != best ? dominated_by(*c) : nullptr;
    if (d && !pages_alone(*c)) {
      c->t.status = fmt::format("fits (its first fit; its fastest plan not searched: {})", dominance(*d, *c));
      continue;
    }
    planner_detail::Goal goal;
    if (c != best) goal.bound_s = c->tokens_per_step / best->t.tokens_per_s;  // only a faster plan matters
    goal.paged_only = d != nullptr;
    Stopwatch sw{c->t.search_s};
    PlanResult pr = planner_detail::plan_for_goal(request(*c), budgets, goal);
    if (pr.found && c == best) best = nullptr;  // its first fit, replaced by its fastest (the others were slower)
    take(*c, pr);                               // not found: nothing faster than the best (the first fit stays)
    if (d)
      c->t.status = fmt::format("fits ({}; its unpaged plans not searched: {})",
                                pr.found ? "its fastest paged plan" : "no paged plan faster than the best found",
                                dominance(*d, *c));
  }
  for (Cand& c : cands) out.tried.push_back(c.t);
  std::stable_sort(out.tried.begin(), out.tried.end(), [](const LayoutTried& a, const LayoutTried& b) {
    if (a.fits != b.fits) return a.fits;
    return a.fits ? better(a.tokens_per_s, a.peak_bytes, b.tokens_per_s, b.peak_bytes)
                  : a.bound_tokens_per_s > b.bound_tokens_per_s;
  });
  out.tried.insert(out.tried.end(), refused.begin(), refused.end());
  const int fitting = int(std::count_if(out.tried.begin(), out.tried.end(), [](auto& t) { return t.fits; }));
  if (best) {
    out.found = true;
    out.layout = best->t.layout;
    out.why = fmt::format(
        "the fastest forecast that fits ({:.0f} tokens/s, device peak {}) of {} layout{} tried; {} fit",
        best->t.tokens_per_s, format_bytes(best->t.peak_bytes), cands.size(), cands.size() == 1 ? "" : "s", fitting);
  } else if (!planner_detail::search_stopped()) {
    // Nothing fits: the lowest-memory layout's diagnosis (what it would need).
    const Cand& low = cands.front();
    out.layout = low.t.layout;
    ForecastRequest r = base;
    r.sequence_parallel = out.layout.sequence_parallel;
    r.zero_stage = out.layout.zero_stage;
    planner_detail::Goal goal{true};
    goal.coarse = !exhaustive;  // as step 1 decided
    out.plan = planner_detail::plan_for_goal(r, budgets, goal);
    out.sim_runs += out.plan.sim_runs;
    out.why = fmt::format("no layout of {} fits; the lowest-memory one ({}) is diagnosed", cands.size(),
                          layout_name(out.layout, base.gpus));
  } else {
    out.layout = cands.front().t.layout;
    out.why = "the time limit passed before any layout was found to fit";
  }
  out.plan.sim_runs = out.sim_runs;
  clock.finish(out.plan);
  return out;
}

int widest_sequence_parallel(const ForecastRequest& base, int fixed_sp) {
  if (fixed_sp > 0) return fixed_sp;
  ForecastRequest r = base;
  r.seq = 0;  // any length's: the heads alone
  for (int sp = std::max(1, base.gpus); sp > 1; --sp)
    if (base.gpus % sp == 0 && seq_parallel_refusal(r, sp).empty()) return sp;
  return 1;
}

MaxSeqLayout max_seq_with_layout(const ForecastRequest& base, const TierBudgets& budgets, int lo, int hi, int multiple,
                                 int fixed_sp, int fixed_zero) {
  if (base.gpus < 2) throw ConfigError("a layout of GPUs needs at least 2 (--gpus)", "command line", "gpus");
  planner_detail::SearchClock clock(base);
  MaxSeqLayout out;
  // The lowest-memory layouts first: the most ranks sharing a row, then the highest ZeRO stage.
  std::vector<Layout> layouts;
  ForecastRequest any_len = base;
  any_len.seq = 0;
  for (int sp = base.gpus; sp >= 1; --sp) {
    if (base.gpus % sp || (fixed_sp > 0 && sp != fixed_sp) || !seq_parallel_refusal(any_len, sp).empty()) continue;
    for (int z = 3; z >= 0; --z)
      if (fixed_zero < 0 || z == fixed_zero) layouts.push_back({sp, z});
  }
  if (layouts.empty())
    throw ConfigError(fmt::format("no layout of {} GPUs runs this model{}", base.gpus,
                                  fixed_sp > 0 ? fmt::format(" with sequence parallel {}", fixed_sp) : ""),
                      "command line", "gpus");
  std::map<int, Layout> fit_layout;  // the layout whose plan answered "fits" at a length
  planner_detail::MaxSeqHooks hooks;
  hooks.decide = [&](const ForecastRequest& r, bool coarse, int& runs) {
    for (const Layout& l : layouts) {
      if (!seq_parallel_refusal(r, l.sequence_parallel).empty()) continue;  // the length does not split
      ForecastRequest q = r;
      q.sequence_parallel = l.sequence_parallel;
      q.zero_stage = l.zero_stage;
      PlanResult pr;
      try {
        const size_t low = planner_detail::floor_peak(q, budgets, runs);
        if (planner_detail::search_stopped()) return PlanResult{};
        if (planner_detail::floor_excludes(low, budgets.device)) continue;
        planner_detail::Goal goal;
        goal.first_fit = true;
        goal.coarse = coarse;
        pr = planner_detail::plan_for_goal(q, budgets, goal);
      } catch (const Error&) {  // a combination the engine refuses (as plan_layout skips it): not this layout
        continue;
      }
      if (pr.found) {
        fit_layout[r.seq] = l;
        return pr;
      }
      runs += pr.sim_runs;
      if (pr.stopped || planner_detail::search_stopped()) return PlanResult{};
    }
    return PlanResult{};
  };
  auto choose = [&](const ForecastRequest& r) {
    out.layout = plan_layout(r, budgets, fixed_sp, fixed_zero);
    PlanResult pr = std::move(out.layout.plan);
    out.layout.plan = PlanResult{};
    return pr;
  };
  hooks.fastest = choose;
  hooks.diagnose = choose;
  out.search = planner_detail::max_seq_search(base, budgets, lo, hi, multiple, hooks);
  if (out.search.found && !(out.layout.found && out.search.plan.found)) {
    // plan_layout did not settle the answer's length by the time limit: the layout whose plan fitted there.
    out.layout.found = true;
    out.layout.layout = fit_layout[out.search.seq];
    out.layout.why =
        "the first layout found to fit at this length (the time limit passed before the others were compared)";
  }
  clock.finish(out.search.plan);
  return out;
}

}  // namespace strata
