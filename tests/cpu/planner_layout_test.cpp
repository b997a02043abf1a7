// The planner's layout of several GPUs (model/plan/layout.h): the sequence-parallel degree and the ZeRO stage it
// chooses when the run leaves them open, through strata-plan's question (model/run/plan_answer.h) and strata-train's
// planning (model/run/job.h). Everything runs on the sim backend: no GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "model/plan/layout.h"
#include "model/plan/planner_candidates.h"
#include "model/plan/planner_search.h"
#include "model/run/job.h"
#include "model/run/plan_answer.h"

using namespace strata;

namespace {

constexpr size_t kGiB = size_t(1) << 30;

// A built-in model at `seq` tokens on `gpus` GPUs of `profile`, full fine-tune, device tier only.
ForecastRequest request(const char* model, const char* profile, int seq, int gpus) {
  ForecastRequest r;
  r.model = resolve_model(model);
  r.seq = seq;
  r.gpus = gpus;
  r.profile = find_profile(profile);
  return r;
}
// Llama-3-8B's shape on H200s (139 GiB); the tiny model on H100s.
ForecastRequest eight_b(int seq, int gpus) {
  return request("Llama-3-8B", "h200", seq, gpus);
}
ForecastRequest tiny(int seq, int gpus) {
  return request("tiny", "h100_80gb", seq, gpus);
}

const LayoutTried& chosen(const LayoutChoice& lc) {
  for (const LayoutTried& t : lc.tried)
    if (t.fits && t.layout.sequence_parallel == lc.layout.sequence_parallel &&
        t.layout.zero_stage == lc.layout.zero_stage)
      return t;
  ADD_FAILURE() << "the chosen layout is not among those tried";
  return lc.tried.front();
}

}  // namespace

// `--gpus 4` alone for an 8B at 1,048,576 tokens: each rank holding the whole state (data parallel, no ZeRO) fits
// nothing, the planner finds sequence parallel over the 4 GPUs with ZeRO-3.
TEST(PlannerLayout, FourGpusAloneFindSequenceParallelWithZero3ForAn8BAtAMillionTokens) {
  const ForecastRequest r = eight_b(1 << 20, 4);
  const TierBudgets budgets{130 * kGiB, 0, 0};
  EXPECT_FALSE(plan_for_budget(r, budgets).found);  // the layout a plain --gpus 4 used to plan

  const LayoutChoice lc = plan_layout(r, budgets, 0, -1);
  ASSERT_TRUE(lc.found) << lc.why;
  EXPECT_EQ(lc.layout.sequence_parallel, 4);
  EXPECT_EQ(lc.layout.zero_stage, 3);
  EXPECT_EQ(lc.tried.size(), 12u);  // sequence parallel 1, 2, 4 x ZeRO 0..3
  // The plan is that layout's, and it fits.
  EXPECT_TRUE(lc.plan.found);
  EXPECT_LE(lc.plan.forecast.peak_bytes, budgets.device);
  EXPECT_EQ(chosen(lc).peak_bytes, lc.plan.forecast.peak_bytes);
  ForecastRequest at = r;
  at.sequence_parallel = 4;
  at.zero_stage = 3;
  EXPECT_TRUE(plan_for_budget(at, budgets).found);
}

// A model whose state fits every rank many times over keeps whole rows on each GPU: sequence parallelism only adds
// all-to-alls, so plain data parallel is the fastest, and no fitting layout is faster than the chosen one.
TEST(PlannerLayout, SmallModelsPickPlainDataParallel) {
  ForecastRequest r;
  r.model = resolve_model("Llama-3.2-1B");
  r.seq = 4096;
  r.gpus = 4;
  r.profile = find_profile("h100_80gb");
  const LayoutChoice lc = plan_layout(r, TierBudgets{60 * kGiB, 0, 0}, 0, -1);
  ASSERT_TRUE(lc.found) << lc.why;
  EXPECT_EQ(lc.layout.sequence_parallel, 1) << lc.why;
  const double best = chosen(lc).tokens_per_s;
  EXPECT_GT(best, 0);
  for (const LayoutTried& t : lc.tried) {
    if (t.fits) {
      EXPECT_LE(t.tokens_per_s, best) << layout_name(t.layout, 4);
    }
    // A layout not searched could not have been faster: keeping everything is its fastest plan.
    if (t.status.rfind("not searched: keeping", 0) == 0) {
      EXPECT_LE(t.bound_tokens_per_s, best);
    }
  }
  EXPECT_NE(lc.why.find("fastest"), std::string::npos) << lc.why;
}

// strata-plan --gpus N --budget: what is given stays, the rest is chosen; with both given nothing is.
TEST(PlannerLayout, ExplicitFlagsAreKept) {
  PlanQuestion q;
  q.model = "Llama-3.2-1B";
  q.seq = 4096;
  q.gpus = 4;
  q.budget = "60GiB";
  {
    const PlanRequest r = plan_request(q);
    EXPECT_TRUE(r.choose_layout);
    EXPECT_EQ(r.fixed_sp, 0);
    EXPECT_EQ(r.fixed_zero, -1);
  }
  q.cfg.sequence_parallel = 2;  // --sequence-parallel 2
  q.cfg.sequence_parallel_given = true;
  {
    const PlanRequest r = plan_request(q);
    ASSERT_TRUE(r.choose_layout);
    const PlanAnswer a = answer_plan(r);
    ASSERT_TRUE(a.found);
    EXPECT_EQ(a.request.sequence_parallel, 2);
    EXPECT_EQ(a.layout.tried.size(), 4u);  // ZeRO 0..3 at sequence parallel 2
    for (const LayoutTried& t : a.layout.tried) EXPECT_EQ(t.layout.sequence_parallel, 2);
    EXPECT_NE(a.yaml.find("sequence_parallel: 2"), std::string::npos) << a.yaml;
  }
  q.cfg.zero_stage = 1;  // --zero-stage 1 too: the layout is the run's
  q.cfg.zero_stage_given = true;
  {
    const PlanRequest r = plan_request(q);
    EXPECT_FALSE(r.choose_layout);
    const PlanAnswer a = answer_plan(r);
    ASSERT_TRUE(a.found);
    EXPECT_EQ(a.request.sequence_parallel, 2);
    EXPECT_EQ(a.request.zero_stage, 1);
    EXPECT_TRUE(a.layout.tried.empty());
    EXPECT_NE(a.yaml.find("zero_stage: 1"), std::string::npos) << a.yaml;
  }
  // A budget question on one GPU, or a forecast without a budget, has no layout to choose.
  q = PlanQuestion{};
  q.model = "Llama-3.2-1B";
  q.seq = 4096;
  q.gpus = 4;
  EXPECT_FALSE(plan_request(q).choose_layout);
}

// strata-train --gpus N --budget: the same choice (model/run/job.h), and a given zero_stage stays.
TEST(PlannerLayout, StrataTrainChoosesTheSameLayout) {
  TrainConfig cfg;
  cfg.seq = 4096;
  cfg.memory_budget_bytes = 60 * kGiB;
  const io::LlamaConfig mc = resolve_model("Llama-3.2-1B");
  EXPECT_TRUE(planner_chooses_layout(cfg, 4));
  EXPECT_FALSE(planner_chooses_layout(cfg, 1));
  Layout layout{1, 0};
  std::string why;
  const PlanResult pr = plan_run_to_budget(cfg, mc, "cuda", "NVIDIA H100 80GB HBM3", "h100_80gb", 4, 0, &layout, &why);
  ASSERT_TRUE(pr.found);
  ForecastRequest r;
  r.model = mc;
  r.seq = 4096;
  r.gpus = 4;
  r.profile = find_profile("h100_80gb");
  const LayoutChoice lc = plan_layout(r, TierBudgets{60 * kGiB, 0, 0}, 0, -1);
  EXPECT_EQ(layout.sequence_parallel, lc.layout.sequence_parallel);
  EXPECT_EQ(layout.zero_stage, lc.layout.zero_stage);
  EXPECT_NE(why.find("layout: "), std::string::npos) << why;

  cfg.zero_stage = 0;
  cfg.zero_stage_given = true;  // --zero-stage 0: only the sequence-parallel degree is open
  Layout given{1, 0};
  plan_run_to_budget(cfg, mc, "cuda", "NVIDIA H100 80GB HBM3", "h100_80gb", 4, 0, &given, &why);
  EXPECT_EQ(given.zero_stage, 0);
  cfg.sequence_parallel_given = true;  // both given: not the planner's
  EXPECT_FALSE(planner_chooses_layout(cfg, 4));
}

// strata-plan --gpus N --max-seq --budget: the layout chosen at each length. The answer is at least as long as
// every fixed layout's own --max-seq (the old answer was sequence parallel 1 without ZeRO's), the chosen layout's
// plan fits it, and the next multiple fits no layout.
TEST(PlannerLayout, MaxSeqChoosesTheLayoutAtEachLength) {
  PlanQuestion q;
  q.model = "tiny";
  q.gpus = 2;
  q.max_seq = true;
  q.budget = "64MiB";
  q.seq_multiple = 128;
  const PlanRequest r = plan_request(q);
  ASSERT_TRUE(r.choose_layout);
  EXPECT_EQ(r.ask, PlanAsk::max_seq);
  const PlanAnswer a = answer_plan(r);
  ASSERT_TRUE(a.found);
  ASSERT_TRUE(a.layout.found) << a.layout.why;
  const int seq = a.search.seq;
  ASSERT_GT(a.search.next_seq, seq);
  EXPECT_EQ(a.request.seq, seq);
  EXPECT_EQ(a.request.sequence_parallel, a.layout.layout.sequence_parallel);
  EXPECT_EQ(a.request.zero_stage, a.layout.layout.zero_stage);
  EXPECT_LE(a.forecast.peak_bytes, r.budgets.device);
  EXPECT_NE(a.yaml.find("sequence_len: " + std::to_string(seq)), std::string::npos) << a.yaml;
  // Every fixed layout's own longest length is no longer.
  int longest_fixed = 0;
  for (int sp : {1, 2})
    for (int z : {0, 3}) {
      PlanQuestion f = q;
      f.cfg.sequence_parallel = sp;
      f.cfg.sequence_parallel_given = true;
      f.cfg.zero_stage = z;
      f.cfg.zero_stage_given = true;
      const PlanRequest fr = plan_request(f);
      ASSERT_FALSE(fr.choose_layout);
      const PlanAnswer fa = answer_plan(fr);
      ASSERT_TRUE(fa.found) << "sp " << sp << " zero " << z;
      EXPECT_LE(fa.search.seq, seq) << "sp " << sp << " zero " << z;
      longest_fixed = std::max(longest_fixed, fa.search.seq);
    }
  EXPECT_EQ(longest_fixed, seq);  // the search asks every layout: the best fixed one's answer
  // The next multiple: no layout fits it.
  ForecastRequest next = a.request;
  next.seq = a.search.next_seq;
  next.sequence_parallel = 1;
  next.zero_stage = 0;
  EXPECT_FALSE(plan_layout(next, r.budgets, 0, -1).found);
}

// The layout search asks the coarse first-fit pass before the whole search (plan_layout's `exhaustive` off): on
// small shapes, at budgets around the least device memory any plan needs (where the coarse pass and the whole
// search can differ), with and without a host tier, it chooses the layout and plan the whole search over every
// layout chooses, and when nothing fits its diagnosis asks no less device memory than the whole search's.
TEST(PlannerLayout, CoarseFirstChoosesWhatTheWholeSearchChooses) {
  int fits = 0, unfit = 0, coarse_no = 0;
  for (auto [gpus, host] : {std::pair{2, size_t(0)}, std::pair{2, size_t(256) << 20}, std::pair{4, size_t(0)}}) {
    const ForecastRequest r = tiny(16384, gpus);
    // The least device memory a plan of any layout needs (the whole search's diagnosis of nothing fitting).
    const LayoutChoice none = plan_layout(r, TierBudgets{size_t(1) << 20, host, 0}, 0, -1, true);
    ASSERT_FALSE(none.found);
    const size_t least = none.plan.minimum_bytes;
    ASSERT_GT(least, size_t(1) << 20);
    for (double share : {0.97, 1.0, 1.03, 1.3}) {
      const TierBudgets b{size_t(double(least) * share), host, 0};
      const std::string what = fmt::format("{} GPUs, budget {} B, host {} B", gpus, b.device, host);
      const LayoutChoice fast = plan_layout(r, b, 0, -1);
      const LayoutChoice whole = plan_layout(r, b, 0, -1, true);
      for (const LayoutTried& t : fast.tried) coarse_no += t.status.find("coarse pass") != std::string::npos;
      ASSERT_EQ(fast.found, whole.found) << what << ": " << fast.why << " / " << whole.why;
      EXPECT_EQ(fast.layout.sequence_parallel, whole.layout.sequence_parallel) << what;
      EXPECT_EQ(fast.layout.zero_stage, whole.layout.zero_stage) << what;
      if (fast.found) {
        ++fits;
        EXPECT_EQ(fast.plan.label, whole.plan.label) << what;
        EXPECT_EQ(fast.plan.forecast.step_s, whole.plan.forecast.step_s) << what;
        EXPECT_EQ(fast.plan.forecast.peak_bytes, whole.plan.forecast.peak_bytes) << what;
      } else {
        ++unfit;
        EXPECT_GE(fast.plan.minimum_bytes, whole.plan.minimum_bytes) << what;
        EXPECT_GT(fast.plan.minimum_bytes, b.device) << what << ": " << fast.why << " / " << whole.why;
      }
    }
  }
  EXPECT_GT(fits, 0);
  EXPECT_GT(unfit, 0);
  EXPECT_GT(coarse_no, 0);  // the coarse pass alone decided some layout
}

// A lower ZeRO stage at the sequence-parallel degree of a ZeRO-3 layout that fits and holds less is not searched when
// ZeRO-3's collectives (besides the all-to-alls) are under 1% of its step: a plan of it would run no faster than the
// same plan under ZeRO-3 less those collectives. Against the whole search over every layout (`exhaustive`, which
// searches them): the same answer, and no layout it skipped is faster there by more than that 1%. Two of the 8B's
// layers at 262,144 tokens on 2 GPUs, where attention is almost the whole step. With a host tier, ZeRO-3's share of
// the state moved both ways counts too (a lower stage may hide its streamed update where ZeRO-3's shows), and without
// ZeRO a full fine-tune's paged plans are still searched.
TEST(PlannerLayout, ALowerStageZero3HoldsLessIsNotSearchedAtLongContext) {
  ForecastRequest r = eight_b(262144, 2);
  r.model.num_hidden_layers = 2;
  int skipped = 0;
  for (auto [gib, host] : {std::pair{size_t(30), size_t(0)}, {40, 0}, {24, 48}}) {
    const TierBudgets b{gib * kGiB, host * kGiB, 0};
    const LayoutChoice fast = plan_layout(r, b, 0, -1);
    const LayoutChoice whole = plan_layout(r, b, 0, -1, true);
    ASSERT_TRUE(fast.found) << fast.why;
    ASSERT_TRUE(whole.found) << whole.why;
    EXPECT_EQ(fast.layout.sequence_parallel, whole.layout.sequence_parallel) << gib << " " << host;
    EXPECT_EQ(fast.layout.zero_stage, whole.layout.zero_stage) << gib << " " << host;
    EXPECT_EQ(fast.plan.label, whole.plan.label) << gib << " " << host;
    EXPECT_EQ(fast.plan.forecast.step_s, whole.plan.forecast.step_s) << gib << " " << host;
    const double best = chosen(fast).tokens_per_s;
    for (const LayoutTried& t : fast.tried) {
      if (t.status.find("not searched") == std::string::npos || t.status.find("ZeRO-3 holds less") == std::string::npos)
        continue;
      ++skipped;
      EXPECT_LT(t.layout.zero_stage, 3);
      bool zero3_fits = false;  // the layout that dominates it: ZeRO-3 at its degree, which fits
      for (const LayoutTried& z : fast.tried)
        zero3_fits |= z.layout.sequence_parallel == t.layout.sequence_parallel && z.layout.zero_stage == 3 && z.fits;
      EXPECT_TRUE(zero3_fits) << layout_name(t.layout, 2);
      for (const LayoutTried& w : whole.tried)
        if (w.layout.sequence_parallel == t.layout.sequence_parallel && w.layout.zero_stage == t.layout.zero_stage &&
            w.fits) {
          EXPECT_LE(w.tokens_per_s, best * 1.01) << layout_name(w.layout, 2) << " at " << gib << " GiB";
        }
    }
  }
  EXPECT_GT(skipped, 0);  // the rule was exercised
}

// A ZeRO layout's search asked only for plans faster than a bound (a faster layout is known) ends with "not found"
// when its fastest is not faster: the ranks are not checked and no round searches again under a lower budget.
TEST(PlannerLayout, AZeroSearchBoundedBelowItsFastestEndsWithoutRounds) {
  ForecastRequest r = eight_b(262144, 2);
  r.model.num_hidden_layers = 2;
  r.sequence_parallel = 2;
  r.zero_stage = 2;
  const TierBudgets b{30 * kGiB, 0, 0};
  PlanResult fastest, bounded;
  {
    planner_detail::SearchClock clock(r);
    fastest = planner_detail::plan_for_goal(r, b, planner_detail::Goal{});
  }
  ASSERT_TRUE(fastest.found);
  {
    planner_detail::SearchClock clock(r);
    planner_detail::Goal g;
    g.bound_s = fastest.forecast.step_s * 0.999;
    bounded = planner_detail::plan_for_goal(r, b, g);
  }
  EXPECT_FALSE(bounded.found);
  EXPECT_TRUE(bounded.rank_peak_bytes.empty());  // no rank was checked
  EXPECT_LT(bounded.sim_runs, fastest.sim_runs);
}

// A layout without ZeRO that ZeRO-3 dominates is searched for its paged plans alone (Goal::paged_only): every plan that
// search tries pages the layers' weights, its answer does, a whole search is no slower, and without a host budget to
// page from it finds nothing.
TEST(PlannerLayout, APagedOnlySearchTriesPagedPlansAlone) {
  const ForecastRequest r = tiny(16384, 2);
  const size_t keep_peak = forecast(r).peak_bytes;
  auto search = [&](const TierBudgets& b, bool paged_only) {
    planner_detail::SearchClock clock(r);
    planner_detail::Goal g;
    g.paged_only = paged_only;
    return planner_detail::plan_for_goal(r, b, g);
  };
  const TierBudgets b{keep_peak * 4 / 5, size_t(1) << 30, 0};
  const PlanResult paged = search(b, true);
  ASSERT_TRUE(paged.found);
  EXPECT_EQ(paged.plan.layer_weights, Decision::page);
  EXPECT_FALSE(paged.tried.empty());
  for (const PlanTried& t : paged.tried) EXPECT_NE(t.label.find("layer_weights: page"), std::string::npos) << t.label;
  const PlanResult whole = search(b, false);
  ASSERT_TRUE(whole.found);
  EXPECT_LE(whole.forecast.step_s, paged.forecast.step_s);
  EXPECT_GT(paged.sim_runs, 0);
  EXPECT_LT(paged.sim_runs, whole.sim_runs);
  EXPECT_FALSE(search(TierBudgets{keep_peak * 4 / 5, 0, 0}, true).found);  // no host budget: nothing to page from
}

// ZeRO's rounds search again under a lower device budget (plan_every_rank): a candidate's forecast without a budget is
// the same there, so under one search clock it is not run again; only its placement under a budget it fits is.
TEST(PlannerLayout, ASearchUnderAnotherBudgetReusesTheSamePlansUnboundedForecast) {
  ForecastRequest r = tiny(16384, 2);
  r.zero_stage = 3;
  const int L = r.model.num_hidden_layers;
  planner_detail::SearchClock clock(r);  // one search: its candidates' sims are shared
  PlanSpec s;
  s.checkpoint_every = 1;
  auto eval = [&](size_t device, PlanResult& res) {
    planner_detail::Search S{
        r, TierBudgets{device, 0, 0}, L, res, nullptr, planner_detail::Goal{}, {}, {}, false, {}, {}, false, {}, {}};
    return S.eval(s);
  };
  PlanResult first, under, over;
  const PlanTried a = eval(size_t(1) << 40, first);
  ASSERT_TRUE(a.fits);
  EXPECT_GE(first.sim_runs, 2);  // unbounded, then under the budget
  const PlanTried b = eval(a.peak_bytes - 1, under);
  EXPECT_EQ(under.sim_runs, 0);  // the same unbounded forecast; over the budget, so no placement under it
  EXPECT_FALSE(b.fits);
  EXPECT_EQ(b.peak_bytes, a.peak_bytes);
  EXPECT_EQ(b.step_s, a.step_s);
  const PlanTried c = eval(a.peak_bytes + (size_t(1) << 30), over);
  EXPECT_TRUE(c.fits);
  EXPECT_EQ(c.step_s, a.step_s);
  EXPECT_EQ(over.sim_runs, first.sim_runs - 1);  // the placement under its budget alone
}
