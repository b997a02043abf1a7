// The op table's gpu twin of tests/cpu/op_table_test.cpp: every case of tests/op_cases.h on the cuda backend
// against the cpu backend, forward and backward, on the same bf16-rounded inputs: NaN first, then inf, then the
// normalised error under a per-dtype tolerance; and the cuda backend takes only its op table entry's scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/op_table.h"
#include "gpu_test_util.h"
#include "tests/op_cases.h"

#ifdef STRATA_HAVE_CUDA
#include "engine/backend_cuda.h"

namespace strata::test {
namespace {

// NaN, then inf (sign included), then sqrt(sum (a - b)^2 / sum b^2) within tol.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::isnan(got[i]), std::isnan(ref[i])) << what << " NaN at " << i;
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      ASSERT_EQ(got[i], ref[i]) << what << " inf at " << i;
      continue;
    }
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), tol) << what;
}

TEST(OpTableGpu, EveryOpOnCudaMatchesCpu) {
  STRATA_REQUIRE_GPU();
  std::set<OpKind> seen;
  for (const OpCase& oc : op_cases()) {
    seen.insert(oc.kind);
    auto cpu = make_cpu_backend(size_t(64) << 20);
    auto cuda = make_cuda_backend(size_t(1) << 30);
    cuda->arena().set_logging(true);
    OpRig a(*cpu, oc, 5), b(*cuda, oc, 5);
    a.forward(), b.forward();
    if (oc.bwd) a.backward(), b.backward();
    for (size_t i = 0; i < oc.specs.size(); ++i) {
      const Role r = oc.specs[i].role;
      if (r != Role::out && r != Role::aux && r != Role::grad && r != Role::inout) continue;
      const double tol = b.t[i].dtype == DType::bf16 ? 2e-2 : 1e-2;  // bf16 outputs round once more
      expect_close(b.get(i), a.get(i), tol, oc.label + " spec " + std::to_string(i));
    }
    const OpInfo& info = op_info(oc.kind);
    for (const ArenaEvent& e : cuda->arena().events()) {
      if (e.tag.rfind("case.", 0) == 0 || e.tag == "workspace.cublaslt") continue;
      EXPECT_TRUE(std::find(info.scratch_tags.begin(), info.scratch_tags.end(), e.tag) != info.scratch_tags.end())
          << oc.label << " took " << e.tag;
    }
  }
  EXPECT_EQ(seen.size(), size_t(OpKind::count_)) << "an OpKind has no case in tests/op_cases.h";
}

}  // namespace
}  // namespace strata::test

#else
TEST(OpTableGpu, Skipped) {
  GTEST_SKIP() << "SKIPPED (gpu): built without the cuda backend";
}
#endif
