// The op table's cpu test: every OpKind has a case (tests/op_cases.h); each runs on the cpu backend and on the
// sim mirroring cpu (the same arena events and peak) and mirroring cuda (only the scratch tags its op table entry
// lists), and each backward passes a central-difference gradient check on cpu.
#include "engine/op_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "engine/backend_sim.h"
#include "engine/op_scratch.h"
#include "tests/op_cases.h"

namespace strata::test {
namespace {

std::vector<ArenaEvent> run_events(Backend& be, const OpCase& oc) {
  be.arena().set_logging(true);
  be.arena().clear_events();
  {
    OpRig rig(be, oc, 7);
    rig.forward();
    if (oc.bwd) rig.backward();
  }
  return be.arena().events();
}

std::unique_ptr<SimBackend> sim(SimMirror m) {
  SimOptions o;
  o.mirror = m;
  o.log_events = true;
  return make_sim_backend(o);
}

TEST(OpTable, EveryOpKindHasACaseAndAName) {
  std::set<OpKind> seen;
  for (const OpCase& c : op_cases()) {
    seen.insert(c.kind);
    EXPECT_EQ(c.label, op_kind_name(c.kind));
  }
  for (int k = 0; k < int(OpKind::count_); ++k)
    EXPECT_TRUE(seen.count(OpKind(k))) << "no op_cases() entry for " << op_kind_name(OpKind(k));
}

TEST(OpTable, EveryScratchTagIsAnOpsAndOnlyScratchTagsAreScratch) {
  std::set<std::string_view> listed;
  for (int k = 0; k < int(OpKind::count_); ++k)
    for (std::string_view t : op_info(OpKind(k)).scratch_tags) {
      EXPECT_TRUE(is_scratch_tag(t)) << t;
      listed.insert(t);
    }
  for (std::string_view t : scratch_tags()) EXPECT_TRUE(listed.count(t)) << t << " belongs to no op";
  EXPECT_FALSE(is_scratch_tag("grads"));
}

TEST(OpTable, SimMirroringCpuAllocatesAsCpu) {
  for (const OpCase& oc : op_cases()) {
    auto cpu = make_cpu_backend(size_t(64) << 20);
    auto s = sim(SimMirror::cpu);
    const std::vector<ArenaEvent> a = run_events(*cpu, oc), b = run_events(*s, oc);
    ASSERT_EQ(a.size(), b.size()) << oc.label;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tag, b[i].tag) << oc.label << " event " << i;
      EXPECT_EQ(a[i].delta, b[i].delta) << oc.label << " event " << i;
    }
    EXPECT_EQ(cpu->arena().high_water(), s->arena().high_water()) << oc.label;
  }
}

TEST(OpTable, SimMirroringCudaTakesOnlyItsOpsScratch) {
  for (const OpCase& oc : op_cases()) {
    auto s = sim(SimMirror::cuda);
    const OpInfo& info = op_info(oc.kind);
    for (const ArenaEvent& e : run_events(*s, oc)) {
      if (e.tag.rfind("case.", 0) == 0) continue;
      EXPECT_TRUE(std::find(info.scratch_tags.begin(), info.scratch_tags.end(), e.tag) != info.scratch_tags.end())
          << oc.label << " took " << e.tag << ", not in its op table entry";
    }
  }
}

TEST(OpTable, CpuGradientsMatchCentralDifferences) {
  int checked = 0;
  for (const OpCase& oc : op_cases()) {
    if (!oc.bwd || !oc.differentiable) continue;
    auto cpu = make_cpu_backend(size_t(64) << 20);
    OpRig rig(*cpu, oc, 11);
    rig.forward();
    rig.backward();
    for (size_t g = 0; g < oc.specs.size(); ++g) {
      if (oc.specs[g].role != Role::grad) continue;
      const size_t x = size_t(oc.specs[g].of);
      const std::vector<float> an = rig.get(g);
      for (size_t j : {size_t(0), an.size() / 2, an.size() - 1}) {
        const float x0 = rig.host[x][j], h = 1e-2f;
        rig.host[x][j] = x0 + h;
        rig.forward();
        const double lp = rig.loss();
        rig.host[x][j] = x0 - h;
        rig.forward();
        const double lm = rig.loss();
        rig.host[x][j] = x0;
        const double fd = (lp - lm) / (double(x0 + h) - double(x0 - h));
        EXPECT_NEAR(an[j], fd, 1e-2 + 2e-2 * std::fabs(fd)) << oc.label << " d/d(spec " << x << ")[" << j << "]";
        for (float v : an) ASSERT_TRUE(std::isfinite(v)) << oc.label;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 16);  // three elements of each of the cases' 16 gradients
}

}  // namespace
}  // namespace strata::test
