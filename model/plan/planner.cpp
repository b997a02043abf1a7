#include "model/plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <numeric>

#include "engine/error.h"
#include "engine/parallel.h"
#include "model/plan/planner_search.h"

namespace strata {

namespace {

std::atomic<int> planner_threads{16};

// The current search's clock (planner_search.h SearchClock), on the thread that runs the search.
struct ClockState {
  int depth = 0;  // nested entry points share the outermost one's clock
  std::chrono::steady_clock::time_point start, next_report;
  planner_detail::Deadline deadline = planner_detail::Deadline::max();
  double limit_s = 0;
  bool stopped = false;
  int runs = 0;
  std::function<void(const std::string&)> progress;
};
thread_local ClockState search_clock;
constexpr auto kProgressEvery = std::chrono::seconds(10);

std::string describe(const PlanSpec& s) {
  std::string out;
  if (s.checkpoint_every > 0) {
    out = s.checkpoint_every == 1 ? "gradient checkpointing"
                                  : fmt::format("gradient checkpointing every {} layers", s.checkpoint_every);
  } else {
    for (Decision d : {Decision::recompute, Decision::host, Decision::disk}) {
      std::string part;
      for (auto& [t, dt] : s.types)
        if (dt == d) part += (part.empty() ? "" : ", ") + t;
      if (!part.empty()) out += fmt::format("{}{} {}", out.empty() ? "" : "; ", decision_name(d), part);
    }
    if (s.checkpointed_layers > 0)
      out += fmt::format(
          "{}checkpoint {}", out.empty() ? "" : " + ",
          s.checkpointed_layers == 1 ? std::string("L0") : fmt::format("L0-L{}", s.checkpointed_layers - 1));
    if (out.empty()) out = "keep everything";
  }
  if (s.host_input_layers > 0) out += fmt::format(" + inputs of the last {} layers on host", s.host_input_layers);
  if (s.state_level != "none") out += fmt::format(" + state on {}: {}", decision_name(s.state_tier), s.state_level);
  if (s.state_layers > 0) out += fmt::format(" + {} in {} layers", s.layers_level, s.state_layers);
  return s.layer_weights == Decision::page ? out + " + layer_weights: page" : out;
}

bool has_type(const PlanSpec& s, const std::string& t) {
  return std::any_of(s.types.begin(), s.types.end(), [&](auto& e) { return e.first == t; });
}

struct Search {
  const ForecastRequest& base;
  TierBudgets b;
  int layers;
  PlanResult& res;
  const Plan* fixed_state;  // base.plan when it places state (every candidate keeps it), else null
  planner_detail::Goal goal;
  std::map<std::string, PlanTried> cache;
  std::map<std::string, PlanSpec> specs;
  bool have_best = false;
  PlanTried best;
  PlanSpec best_spec;
  bool have_short = false;
  PlanTried short_t;

  bool tiers_ok(const PlanTried& t) const { return t.host_bytes <= b.host && t.disk_bytes <= b.disk; }
  // first_fit: a plan fits, so the search is over.
  bool done() const { return goal.first_fit && have_best; }
  // A plan must be faster than this to matter (the goal's bound, the best found). Adding recompute, tier
  // decisions or state moves to a candidate only adds work to its step, so what starts slower is skipped.
  double bound() const { return std::min(goal.bound_s, have_best ? best.step_s : goal.bound_s); }
  bool too_slow(const PlanTried& t) const { return t.step_s > bound(); }

  // A candidate's sim runs: unbounded (its in-use peak), then, when that fits the device and the
  // tiers, under the device budget (placement). They depend on the candidate alone, so prefetch runs
  // many at once and eval consumes them in the search's own order: the same answer as one by one.
  struct Sims {
    Forecast f, fb;
    bool budgeted = false;
    bool skipped = false;  // not run: the search's time limit had passed
    std::exception_ptr error;
  };
  std::map<std::string, Sims> pre;

  Sims simulate(const PlanSpec& s, planner_detail::Deadline deadline) const {
    Sims o;
    if (std::chrono::steady_clock::now() > deadline) {
      o.skipped = true;
      return o;
    }
    try {
      ForecastRequest r = base;
      r.plan = make_plan(s, layers, fixed_state);
      r.budget = 0;  // the in-use peak does not depend on the budget; fitting does (placement)
      o.f = forecast(r);
      if (o.f.fits && o.f.peak_bytes <= b.device && o.f.host_charged_bytes() <= b.host &&
          o.f.peak_disk_bytes <= b.disk) {
        r.budget = b.device;
        o.fb = forecast(r);
        o.budgeted = true;
      }
    } catch (...) {
      o.error = std::current_exception();
    }
    return o;
  }

  // Runs the sims of the candidates not yet evaluated on the host's cores (engine/parallel.h).
  void prefetch(const std::vector<PlanSpec>& specs) {
    std::vector<std::pair<std::string, const PlanSpec*>> todo;
    for (const PlanSpec& s : specs) {
      std::string label = describe(s);
      if (cache.count(label) || pre.count(label) ||
          std::any_of(todo.begin(), todo.end(), [&](auto& e) { return e.first == label; }))
        continue;
      todo.emplace_back(std::move(label), &s);
    }
    if (todo.size() < 2 || planner_detail::out_of_time()) return;  // eval runs a single one itself
    std::vector<Sims> out(todo.size());
    const planner_detail::Deadline deadline = planner_detail::search_deadline();  // the workers' threads have no clock
    parallel_chunks(
        todo.size(), 1, [&](size_t i, size_t) { out[i] = simulate(*todo[i].second, deadline); },
        size_t(planner_threads.load()));
    for (size_t i = 0; i < todo.size(); ++i) pre.emplace(std::move(todo[i].first), std::move(out[i]));
  }

  PlanTried eval(const PlanSpec& s) {
    const std::string label = describe(s);
    if (auto it = cache.find(label); it != cache.end()) return it->second;
    // Past the time limit nothing more is tried: an untried candidate reads as not fitting, and is
    // neither cached nor listed, so the search runs out quickly to the best found so far.
    PlanTried untried{label};
    if (planner_detail::out_of_time()) return untried;
    Sims sims;
    if (auto it = pre.find(label); it != pre.end()) {
      sims = std::move(it->second);
      pre.erase(it);
    } else {
      sims = simulate(s, planner_detail::search_deadline());
    }
    if (sims.skipped) {  // prefetched after the limit passed
      planner_detail::out_of_time();
      return untried;
    }
    if (sims.error) std::rethrow_exception(sims.error);
    Forecast& f = sims.f;
    res.sim_runs += sims.budgeted ? 2 : 1;
    PlanTried t{label, f.peak_bytes, f.high_water_bytes, f.host_charged_bytes(), f.peak_disk_bytes, f.step_s, false};
    const bool device_ok = f.fits && f.peak_bytes <= b.device;
    if (device_ok && !tiers_ok(t) && (!have_short || t.step_s < short_t.step_s)) have_short = true, short_t = t;
    if (sims.budgeted) {
      Forecast& fb = sims.fb;
      t.fits = fb.fits;
      if (fb.fits) t.high_water_bytes = fb.high_water_bytes;
      if (fb.fits &&
          (!have_best || t.step_s < best.step_s || (t.step_s == best.step_s && t.peak_bytes < best.peak_bytes))) {
        have_best = true;
        best = t;
        best_spec = s;
        res.plan = make_plan(s, layers, fixed_state);
        res.label = label;
        res.forecast = std::move(fb);
      }
    }
    cache[label] = t;
    specs[label] = s;
    res.tried.push_back(t);
    planner_detail::search_progress(sims.budgeted ? 2 : 1, have_best ? best.label : "");
    return t;
  }

  // Fewest checkpointed layers that make `s` fit (bisection: memory falls as n grows).
  void checkpointed(PlanSpec s) {
    PlanSpec all_layers = s;
    all_layers.checkpointed_layers = layers;
    s.checkpointed_layers = 0;
    if (done() || too_slow(eval(s))) return;  // checkpointing only adds recompute to it
    prefetch({s, all_layers});
    if (eval(s).fits) return;  // no layer needs checkpointing
    s.checkpointed_layers = layers;
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

  // Greedy: add the (type, decision) that saves the most peak bytes per second added, until the
  // plan fits. Returns every prefix.
  std::vector<PlanSpec> greedy(PlanSpec cur_spec, const std::vector<std::string>& types,
                               const std::vector<Decision>& decisions) {
    std::vector<PlanSpec> prefixes{cur_spec};
    PlanTried cur = eval(cur_spec);
    while (!cur.fits && !too_slow(cur) && !done()) {
      double best_score = -1;
      PlanSpec next;
      PlanTried next_t;
      std::vector<PlanSpec> round;
      for (auto& t : types)
        if (!has_type(cur_spec, t))
          for (Decision d : decisions) {
            round.push_back(cur_spec);
            round.back().types.emplace_back(t, d);
          }
      prefetch(round);
      for (auto& t : types) {
        if (has_type(cur_spec, t)) continue;
        for (Decision d : decisions) {
          PlanSpec s = cur_spec;
          s.types.emplace_back(t, d);
          PlanTried tr = eval(s);
          if (tr.peak_bytes >= cur.peak_bytes || !tiers_ok(tr)) continue;
          const double saved = double(cur.peak_bytes - tr.peak_bytes);
          const double score = saved / std::max(tr.step_s - cur.step_s, 1e-6);
          if (score > best_score) best_score = score, next = s, next_t = tr;
        }
      }
      if (best_score < 0) break;
      cur_spec = next;
      cur = next_t;
      prefixes.push_back(cur_spec);
    }
    return prefixes;
  }

  // hidden_states on tier d (layer inputs there, the rest of each layer recomputed), and every
  // layer slot there; with both tiers, hidden_states split over them (split_inputs).
  void tier_families(const PlanSpec& start, Decision d) {
    PlanSpec hs = start;
    hs.types = {{"L*.input", d}, {"L*", Decision::recompute}};
    eval(hs);
    if (d == Decision::disk) split_inputs(hs);
    PlanSpec all = start;
    all.types = {{"L*", d}};
    eval(all);
  }

  static bool inputs_on_disk(const PlanSpec& s) {
    return s.checkpoint_every == 0 && std::any_of(s.types.begin(), s.types.end(), [](auto& e) {
             return e.first == "L*.input" && e.second == Decision::disk;
           });
  }

  // Layer inputs on disk with a host budget too: the last n layers' inputs on the host instead (read
  // back first in backward, so the host's faster copies sit where the wait would be shortest), n the
  // most that keeps the host tier within its budget (bisection: host bytes grow with n). For when
  // neither tier holds every layer's input.
  void split_inputs(PlanSpec s) {
    if (!b.host || !b.disk || !inputs_on_disk(s)) return;
    s.host_input_layers = 0;
    if (eval(s).host_bytes > b.host) return;  // the state alone leaves no room
    int lo = 0, hi = layers;
    s.host_input_layers = hi;
    if (eval(s).host_bytes <= b.host) return;  // every input fits the host
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      s.host_input_layers = mid;
      (eval(s).host_bytes <= b.host ? lo : hi) = mid;
    }
    s.host_input_layers = lo;
    eval(s);
  }

  // 5. The state's level per layer, for the activation plan `act`: for each pair of adjacent levels
  //    (the lower everywhere, the higher in k layers spread evenly), the fewest k whose step fits the
  //    device (bisection: device bytes fall as k grows), which moves the fewest bytes over the link
  //    and keeps the embedding's and head's state where the lower level puts it; then the split
  //    family's host share again (the state changed the host's room).
  void place(PlanSpec act, const std::vector<std::string>& levels) {
    act.host_input_layers = 0;
    // Fits the device: its high-water mark too, so the placement under the budget fits as well
    // (a peak just under the budget can need more than it once fragmentation is counted).
    auto device_ok = [&](const PlanSpec& s) {
      const PlanTried t = eval(s);
      return t.peak_bytes <= b.device && t.high_water_bytes <= b.device;
    };
    for (size_t i = 0; i + 1 < levels.size(); ++i) {
      PlanSpec s = act;
      s.state_level = levels[i];
      s.layers_level = levels[i + 1];
      s.state_layers = layers;
      if (!device_ok(s)) continue;  // every layer at the higher level is not enough
      s.state_layers = 0;
      s.layers_level = "none";
      if (device_ok(s)) {  // the lower level alone fits the device
        split_inputs(s);
        continue;
      }
      s.layers_level = levels[i + 1];
      int lo = 0, hi = layers;  // hi fits the device, lo does not
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        s.state_layers = mid;
        (device_ok(s) ? hi : lo) = mid;
      }
      s.state_layers = hi;
      eval(s);
      split_inputs(s);
    }
  }

  // Changes one per-type decision of the best plan at a time while that is faster and fits.
  void refine(const std::vector<Decision>& decisions) {
    for (int pass = 0; pass < 4 && have_best; ++pass) {
      const PlanSpec start = best_spec;
      if (start.checkpoint_every > 0) return;
      std::vector<PlanSpec> round;
      for (size_t i = 0; i < start.types.size(); ++i) {
        round.push_back(start);
        round.back().types.erase(round.back().types.begin() + long(i));
        for (Decision d : decisions) {
          round.push_back(start);
          round.back().types[i].second = d;
        }
      }
      prefetch(round);
      for (size_t i = 0; i < start.types.size(); ++i) {
        PlanSpec without = start;
        without.types.erase(without.types.begin() + long(i));
        eval(without);
        for (Decision d : decisions) {
          if (d == start.types[i].second) continue;
          PlanSpec s = start;
          s.types[i].second = d;
          eval(s);
        }
      }
      if (describe(best_spec) == describe(start)) return;
    }
  }
};

}  // namespace

void set_planner_threads(int threads) {
  planner_threads = std::max(threads, 1);
}

namespace planner_detail {

SearchClock::SearchClock(const ForecastRequest& r) {
  ClockState& c = search_clock;
  outermost_ = c.depth++ == 0;
  if (!outermost_) return;
  c.start = std::chrono::steady_clock::now();
  c.next_report = c.start + kProgressEvery;
  c.limit_s = r.plan_time_limit_s;
  c.deadline = r.plan_time_limit_s > 0 ? c.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(r.plan_time_limit_s))
                                       : Deadline::max();
  c.stopped = false;
  c.runs = 0;
  c.progress = r.plan_progress;
}

SearchClock::~SearchClock() {
  ClockState& c = search_clock;
  if (--c.depth == 0) {
    c.deadline = Deadline::max();
    c.progress = nullptr;
  }
}

void SearchClock::finish(PlanResult& pr) const {
  const ClockState& c = search_clock;
  if (!c.stopped) return;
  pr.stopped = true;
  if (outermost_ && c.progress)
    c.progress(fmt::format(
        "planner: stopped at its time limit of {} s (plan_time_limit, --plan-time-limit) after {} sim runs: {}",
        c.limit_s, c.runs,
        pr.found ? "the plan is the fastest found by then, not necessarily the fastest there is"
                 : "no plan was found to fit by then; a longer limit may find one"));
}

Deadline search_deadline() {
  return search_clock.deadline;
}

bool out_of_time() {
  ClockState& c = search_clock;
  if (!c.stopped && c.deadline != Deadline::max() && std::chrono::steady_clock::now() > c.deadline) c.stopped = true;
  return c.stopped;
}

bool search_stopped() {
  return search_clock.stopped;
}

void search_progress(int runs, const std::string& best) {
  ClockState& c = search_clock;
  c.runs += runs;
  const auto now = std::chrono::steady_clock::now();
  if (!c.progress || now < c.next_report) return;
  c.next_report = now + kProgressEvery;
  const double s = std::chrono::duration<double>(now - c.start).count();
  c.progress(fmt::format("planner: {:.0f} s{}, {} sim runs; {}", s,
                         c.limit_s > 0 ? fmt::format(" of at most {}", c.limit_s) : std::string(), c.runs,
                         best.empty() ? std::string("no plan fits yet") : "fastest fitting so far: " + best));
}

}  // namespace planner_detail

Plan make_plan(const PlanSpec& s, int layers, const Plan* fixed_state) {
  auto state = [&](Plan& p) {
    if (fixed_state) {
      p.take_state(*fixed_state);
    } else {
      p.set_state_offloading(s.state_level, "planner", s.state_tier);
      p.set_state_offloading_layers(s.layers_level, s.state_layers, "planner");
    }
    p.set_layer_weights(s.layer_weights, "planner");
  };
  if (s.checkpoint_every > 0) {
    Plan p = Plan::gradient_checkpointing(s.checkpoint_every);
    state(p);
    return p;
  }
  PlanSpec body = s;
  body.layer_weights = Decision::keep;  // not in the activation preset's label (the plan's layer_weights)
  Plan p;
  state(p);
  p.preset = "auto: " + describe(body);
  // The last host_input_layers layers' inputs on the host, before the types (which put the others' on disk).
  for (int i = std::max(0, layers - s.host_input_layers); i < layers && s.host_input_layers > 0; ++i)
    p.overrides.emplace_back(fmt::format("L{}.input", i), Decision::host);
  for (int i = 0; i < std::min(s.checkpointed_layers, layers); ++i) {
    p.overrides.emplace_back(fmt::format("L{}.input", i), Decision::keep);
    p.overrides.emplace_back(fmt::format("L{}.*", i), Decision::recompute);
  }
  for (auto& [t, d] : s.types) p.overrides.emplace_back(t, d);
  return p;
}

namespace {

// goal.diagnose: when nothing fits, also find the tier that would help and the minimum device budget
// (plan_for_budget's answer); without it an unfit search returns at once (max_seq_for_budget).
PlanResult plan_search(const ForecastRequest& base, const TierBudgets& budgets, const planner_detail::Goal& goal) {
  PlanResult res;
  res.budgets = budgets;
  const int L = base.model.num_hidden_layers;
  const Plan* fixed = base.plan.places_state() ? &base.plan : nullptr;
  Search S{base, budgets, L, res, fixed, goal, {}, {}, false, {}, {}, false, {}, {}};
  const bool diagnose = goal.diagnose;

  // The saved class types of this model and mode (the loss path stays kept: it is needed at once).
  ForecastRequest keep = base;
  keep.plan = Plan::keep_everything();
  if (fixed) {
    keep.plan.take_state(*fixed);
    keep.plan.set_layer_weights(Decision::keep, "planner");
  }
  keep.budget = 0;
  if (planner_detail::out_of_time()) return res;  // the time limit passed before this search began
  Forecast kf = forecast(keep);
  res.sim_runs++;
  planner_detail::search_progress(1);
  res.persistent_bytes = kf.persistent_bytes;
  std::vector<std::string> types;
  for (auto& row : kf.plan_rows)
    if (row.cls.rfind("L*.", 0) == 0) types.push_back(row.cls);

  // ZeRO over several ranks: each rank's own share of the state takes the plan's tiers (the host budget is
  // each rank's: a process's pinned memory).
  const bool zero_sharded = base.zero_stage >= 1 && base.gpus > 1;
  // Weight paging: the layers' matrices live in host memory, so only with a host budget that holds them;
  // trainable ones (a full fine-tune) not with ZeRO (refused: model/llama.cpp).
  const bool can_page = base.mode != TrainMode::full || !zero_sharded;
  std::vector<bool> paging{false};
  if (can_page && budgets.host > 0 && !planner_detail::out_of_time()) {
    ForecastRequest pr = keep;
    pr.plan.set_layer_weights(Decision::page, "planner");
    Forecast pf = forecast(pr);
    res.sim_runs++;
    if (pf.paged_host_bytes > 0 && pf.host_charged_bytes() <= budgets.host) paging.push_back(true);
  }
  // Decision sets: keep/recompute alone (so the tiers never make the answer worse), then with the
  // tiers that have a budget.
  std::vector<std::vector<Decision>> decision_sets{{Decision::recompute}};
  std::vector<Decision> all{Decision::recompute};
  if (budgets.host) all.push_back(Decision::host);
  if (budgets.disk) all.push_back(Decision::disk);
  if (all.size() > 1) decision_sets.push_back(all);

  std::vector<std::string> selective;
  for (const char* t : {"L*.attn_norm.out", "L*.mlp_norm.out", "L*.mlp.act"})
    if (std::find(types.begin(), types.end(), t) != types.end()) selective.push_back(t);

  // Persistent state on the host tier (full and adapter training alike: the trainable state), each
  // level tried only with a host budget and only while keeping it on the device left something unfit.
  std::vector<std::string> levels{"none"};  // with a fixed placement: "none" stands for it
  if (budgets.host > 0 && !fixed) levels = {std::begin(kStateOffloadingLevels), std::end(kStateOffloadingLevels)};
  // With a disk budget, the levels on the disk tier too (their classes in the state file; "all" keeps
  // the gradients on the host, so only with a host budget).
  std::vector<std::pair<std::string, Decision>> starts;
  for (const std::string& level : levels) starts.emplace_back(level, Decision::host);
  if (budgets.disk > 0 && !fixed)
    for (const char* level : {"optimizer", "master", "all"})
      if (budgets.host > 0 || std::string(level) != "all") starts.emplace_back(level, Decision::disk);
  // The lowest-memory families of a start: checkpointing every layer, and on each tier with a budget the
  // layer inputs there (the rest recomputed) and every layer slot there. When none of them fits the device,
  // nothing in the start's other families (which keep more of the same slots) is taken to fit either.
  auto floors = [&](const PlanSpec& start) {
    std::vector<PlanSpec> v(1, start);
    v[0].checkpoint_every = 1;
    for (Decision d : all)
      if (d != Decision::recompute) {
        v.push_back(start);
        v.back().types = {{"L*.input", d}, {"L*", Decision::recompute}};
        v.push_back(start);
        v.back().types = {{"L*", d}};
      }
    return v;
  };
  {
    std::vector<PlanSpec> first;
    for (const auto& [level, tier] : starts)
      for (bool paged : paging) {
        first.emplace_back();
        first.back().layer_weights = paged ? Decision::page : Decision::keep;
        first.back().state_level = level;
        first.back().state_tier = tier;
      }
    S.prefetch(first);
    std::vector<PlanSpec> low;  // every start's floors at once (a coarse first pass over the starts)
    for (const PlanSpec& st : first)
      if (!S.eval(st).fits)
        for (PlanSpec& f : floors(st)) low.push_back(std::move(f));
    S.prefetch(low);
  }
  for (const auto& [level, tier] : starts)
    for (bool paged : paging) {
      PlanSpec start;
      start.layer_weights = paged ? Decision::page : Decision::keep;
      start.state_level = level;
      start.state_tier = tier;
      if (S.done()) break;
      const PlanTried st = S.eval(start);
      if (st.fits) continue;         // keep everything fits: nothing is faster (with this paging)
      if (S.too_slow(st)) continue;  // every plan of this start is slower than one found
      size_t floor_peak = std::numeric_limits<size_t>::max();
      for (const PlanSpec& f : floors(start)) floor_peak = std::min(floor_peak, S.eval(f).peak_bytes);
      if (planner_detail::floor_excludes(floor_peak, budgets.device) || S.done())
        continue;  // nothing of this start fits the device
      // 3. (first: the low-memory families give the others a step to beat) Gradient checkpointing every k
      //    layers; on each tier with a budget, hidden_states (layer inputs there, the rest recomputed) and
      //    everything there.
      std::vector<PlanSpec> every;
      for (int k = 1; k <= std::max(1, L); k *= 2) {
        every.push_back(start);
        every.back().checkpoint_every = k;
      }
      S.prefetch(every);
      for (const PlanSpec& s : every) S.eval(s);
      for (Decision d : all)
        if (d != Decision::recompute) S.tier_families(start, d);
      if (S.done() || goal.coarse) continue;  // coarse: the families above alone
      // 1. and 2.: greedy prefixes, each with the fewest checkpointed layers that make it fit.
      std::vector<PlanSpec> prefixes;
      for (auto& ds : decision_sets) {
        auto p = S.greedy(start, types, ds);
        prefixes.insert(prefixes.end(), p.begin(), p.end());
      }
      PlanSpec sel = start;
      for (auto& t : selective) sel.types.emplace_back(t, Decision::recompute);
      if (!sel.types.empty()) S.checkpointed(sel);
      for (auto& p : prefixes) S.checkpointed(p);
    }
  // 4. Refine the fastest plan found, one decision at a time.
  if (!S.done() && !goal.coarse) S.refine(all);  // keep (dropping a type from the plan) is tried there too
  // 5. The state per layer (Search::place) under the 8 fastest activation plans that fit the device
  //    at some state level, ranked by their fastest step at any level (the state-on-device step, when
  //    it was tried: what a placement moving less state approaches), then refine again.
  if (levels.size() > 1 && !S.done()) {
    struct Act {
      PlanSpec spec;
      double step_s;
      bool fits_device;
    };
    std::vector<Act> acts;
    std::map<std::string, size_t> seen;
    for (const PlanTried& t : res.tried) {
      PlanSpec a = S.specs.at(t.label);
      a.state_level = a.layers_level = "none";
      a.state_layers = a.host_input_layers = 0;
      a.state_tier = Decision::host;  // place() moves state to the host tier
      const std::string key = describe(a);
      const bool fits = t.peak_bytes <= budgets.device;
      auto [it, fresh] = seen.emplace(key, acts.size());
      if (fresh) {
        acts.push_back({a, t.step_s, fits});
      } else {
        Act& e = acts[it->second];
        e.step_s = std::min(e.step_s, t.step_s);
        e.fits_device = e.fits_device || fits;
      }
    }
    std::erase_if(acts, [](const Act& a) { return !a.fits_device; });
    std::stable_sort(acts.begin(), acts.end(), [](const Act& x, const Act& y) { return x.step_s < y.step_s; });
    // Placing state off the device only adds copies to an activation plan's step.
    for (size_t i = 0; i < std::min<size_t>(acts.size(), 8) && acts[i].step_s <= S.bound() && !S.done(); ++i)
      S.place(acts[i].spec, levels);
    if (!S.done() && !goal.coarse) S.refine(all);
  }

  res.found = S.have_best;
  // 6. The activations again, around state placements: steps 1-4 chose activation plans for whole state
  //    levels and step 5 placed the state under the fastest of them, by the fewest layers that fit. A
  //    placement moving more layers can leave room for much faster activations, so with the placement
  //    fixed (as a caller's is), steps 1-4 run again for the one found and for the higher of its two levels
  //    in a quarter, half and three quarters of the layers; the fastest plan wins.
  if (res.found && !fixed && res.plan.places_state() && !goal.first_fit) {
    const PlanSpec& b = S.best_spec;
    std::string lower = b.state_level, upper = b.layers_level;
    Decision tier = b.state_tier;
    if (b.state_layers == 0) {  // a whole level: vary the layers of it over the level below
      upper = b.state_level;
      const auto* lv = std::find(std::begin(kStateOffloadingLevels), std::end(kStateOffloadingLevels), upper);
      lower = lv == std::begin(kStateOffloadingLevels) ? std::string("none") : std::string(*(lv - 1));
      tier = Decision::host;
    }
    std::vector<Plan> placements{res.plan};
    for (int k : {L / 4, L / 2, 3 * L / 4})
      if (k > 0 && k < L && k != b.state_layers && upper != "none") {
        Plan p;
        p.set_state_offloading(lower, "planner", tier);
        p.set_state_offloading_layers(upper, k, "planner");
        placements.push_back(std::move(p));
      }
    for (const Plan& placement : placements) {
      ForecastRequest around = base;
      around.plan = Plan::keep_everything();
      around.plan.take_state(placement);
      around.plan.set_layer_weights(Decision::keep, "planner");  // the search tries paging itself
      planner_detail::Goal sub_goal;
      sub_goal.bound_s = std::min(goal.bound_s, res.forecast.step_s);  // only a faster plan replaces it
      PlanResult sub = plan_search(around, budgets, sub_goal);
      res.sim_runs += sub.sim_runs;
      const std::string state = fmt::format(" + state: {}", around.plan.state_label());
      for (PlanTried& t : sub.tried) {
        t.label += state;
        res.tried.push_back(std::move(t));
      }
      if (sub.found && sub.forecast.step_s < res.forecast.step_s) {
        res.plan = std::move(sub.plan);
        res.label = sub.label + state;
        res.forecast = std::move(sub.forecast);
      }
    }
  }
  if (res.found || !diagnose || planner_detail::search_stopped()) return res;
  if (budgets.host == 0 || (can_page && paging.size() == 1)) {
    // Would the host tier have helped? Forecast its families (and paging) unconstrained, first
    // with the state on the device, then with more of it on the host.
    for (const char* level : kStateOffloadingLevels) {
      for (bool paged : {false, true}) {
        if (paged && !can_page) continue;
        PlanSpec s;
        s.layer_weights = paged ? Decision::page : Decision::keep;
        s.state_level = level;
        if (paged || s.state_level != "none") S.eval(s);
        S.tier_families(s, Decision::host);
      }
      if (S.have_short || fixed)
        break;  // (a fixed placement is the only level)  // the least state on the host that lets a plan fit the device
    }
  }
  if (S.have_short) {
    const PlanTried& t = S.short_t;
    res.short_tier_label = t.label;
    if (t.host_bytes > budgets.host) {
      res.short_tier = "host";
      res.short_tier_needs = t.host_bytes;
    } else {
      res.short_tier = "disk";
      res.short_tier_needs = t.disk_bytes;
    }
  }
  // Nothing fits: the lowest-memory candidate within the tier budgets and the device budget it
  // needs, verified by a sim run.
  const PlanTried* low = nullptr;
  for (auto& t : res.tried)
    if (S.tiers_ok(t) && (!low || t.high_water_bytes < low->high_water_bytes)) low = &t;
  if (!low || planner_detail::search_stopped()) return res;  // stopped by the time limit: no diagnosis
  const PlanSpec& ls = S.specs.at(low->label);
  ForecastRequest r = base;
  r.plan = make_plan(ls, L);
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

// plan_search at one tile count; the labels say the tile count.
PlanResult plan_at_tiles(const ForecastRequest& base, const TierBudgets& budgets, int tiles,
                         const planner_detail::Goal& goal) {
  ForecastRequest r = base;
  r.mlp_tiles = tiles;
  PlanResult pr = plan_search(r, budgets, goal);
  pr.plan.mlp_tiles = tiles;  // the plan carries what the planner decided
  if (tiles > 1) {
    const std::string tail = fmt::format(" + MLP in {} tiles", tiles);
    if (!pr.label.empty()) pr.label += tail;
    if (!pr.short_tier_label.empty()) pr.short_tier_label += tail;
    for (auto& t : pr.tried) t.label += tail;
  }
  return pr;
}

}  // namespace

namespace planner_detail {

// The tile count too (plan_for_budget's comment): untiled first, tiles only when needed to fit.
// Whether anything fits at a tile count is asked with first-fit searches (they end at the first plan that
// fits): the most tiles (the least memory) first, so a length nothing fits at (max-seq's bisection meets
// many) costs two searches; then the fewest tiles that fit, by bisection (fitting taken as monotone in the
// tile count). Only there, and at twice as many tiles (faster when the memory freed lets more be kept),
// does the whole search run. A first-fit goal (whether anything fits) searches the most tiles alone.
PlanResult plan_with_tiles(const ForecastRequest& base, const TierBudgets& budgets, const Goal& goal) {
  if (base.mlp_tiles > 0) return plan_at_tiles(base, budgets, base.mlp_tiles, goal);
  const std::vector<int> cands = mlp_tile_candidates(base);
  // Whether anything fits (first_fit): the most tiles alone, the least memory.
  if (goal.first_fit && !cands.empty()) return plan_at_tiles(base, budgets, cands.back(), goal);
  // Untiled when something fits untiled. With tiles possible, the coarse first-fit pass (the low-memory families)
  // asks first: where none of them fits untiled the whole untiled search is skipped (a mix it might still find
  // would be within the tiles' small cost of the tiled plan).
  PlanResult res;
  if (!cands.empty()) {
    Goal probe = goal;
    probe.diagnose = false;
    probe.first_fit = probe.coarse = true;
    res = plan_at_tiles(base, budgets, 1, probe);
  }
  if (cands.empty() || res.found) {
    const int probe_runs = res.sim_runs;
    Goal untiled = goal;
    untiled.diagnose = goal.diagnose && cands.empty();
    res = plan_at_tiles(base, budgets, 1, untiled);
    res.sim_runs += probe_runs;
    if (res.found || cands.empty()) return res;
  }
  int runs = res.sim_runs;
  std::vector<PlanTried> tried = std::move(res.tried);
  std::map<size_t, PlanResult> probes;  // first-fit searches, by index into cands
  auto keep = [&](PlanResult& pr) {
    runs += pr.sim_runs;
    tried.insert(tried.end(), pr.tried.begin(), pr.tried.end());
  };
  auto probe = [&](size_t i, bool diag) -> const PlanResult& {
    if (auto it = probes.find(i); it != probes.end()) return it->second;
    Goal g = goal;
    g.first_fit = true;
    g.diagnose = diag;
    PlanResult pr = plan_at_tiles(base, budgets, cands[i], g);
    keep(pr);
    return probes.emplace(i, std::move(pr)).first->second;
  };
  auto finish = [&](PlanResult pr) {
    pr.sim_runs = runs;
    pr.tried = std::move(tried);
    return pr;
  };
  const size_t last = cands.size() - 1;
  if (!probe(last, goal.diagnose).found) return finish(probes.at(last));  // nothing fits at any tile count
  size_t lo = 0, hi = last;                                               // cands[hi] fits
  while (lo < hi && !search_stopped()) {
    const size_t mid = lo + (hi - lo) / 2;
    if (probe(mid, false).found)
      hi = mid;
    else
      lo = mid + 1;
  }
  Goal whole = goal;
  whole.diagnose = false;
  PlanResult best = plan_at_tiles(base, budgets, cands[hi], whole);
  keep(best);
  if (!best.found) best = probes.at(hi);  // the time limit passed: the plan the probe found
  if (hi < last && !search_stopped()) {
    whole.bound_s = std::min(goal.bound_s, best.forecast.step_s);  // only a faster plan replaces it
    PlanResult more = plan_at_tiles(base, budgets, cands[hi + 1], whole);
    keep(more);
    if (more.found && more.forecast.step_s < best.forecast.step_s) best = std::move(more);
  }
  return finish(std::move(best));
}

}  // namespace planner_detail

std::vector<int> mlp_tile_candidates(const ForecastRequest& base) {
  std::vector<int> v;
  if (base.mode == TrainMode::lora)
    for (const std::string& m : base.lora_targets)
      if (m == "gate_proj" || m == "up_proj" || m == "down_proj") return v;  // the tiled op has no adapters
  const int64_t n = int64_t(base.batch) * base.seq / std::max(1, base.sequence_parallel);  // this rank's rows
  for (int k = 2; k <= 64 && n / k >= 64; k *= 2) v.push_back(k);
  return v;
}

}  // namespace strata
