// examples/bench's workload description: the GEMM list --sgemm-rate times is
// the training step's matmul FLOPs, no more and no less.
#include <gtest/gtest.h>

#include "examples/bench/workloads.h"
#include "test_util.h"

namespace attograd {
namespace {

TEST(BenchWorkloads, StepGemmsAreThreeTimesTheForwardFlops) {
  bench::BenchConfig wide = bench::kBase, long_ = bench::kBase;
  wide.d_model = 512;
  wide.d_ff = 2048;
  long_.len = 256;
  for (const bench::BenchConfig& c : {bench::kTiny, bench::kBase, bench::kLm, wide, long_}) {
    SCOPED_TRACE(c.name + " E=" + std::to_string(c.d_model) + " L=" + std::to_string(c.len));
    EXPECT_DOUBLE_EQ(bench::gemm_flops(bench::step_gemms(c)), 3 * bench::forward_flops(c));
  }
}

// Base: R = 1024 rows, E 256, F 1024, 8 heads of 32, 6 attentions (2 encoder,
// 2 + 2 decoder), 32·8 heads each.
TEST(BenchWorkloads, BaseShapes) {
  const std::vector<bench::StepGemm> g = bench::step_gemms(bench::kBase);
  auto has = [&](int64_t calls, int64_t heads, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
    for (const bench::StepGemm& s : g)
      if (s.calls == calls && s.heads == heads && s.M == M && s.N == N && s.K == K && s.trans_a == ta &&
          s.trans_b == tb)
        return true;
    return false;
  };
  EXPECT_TRUE(has(24, 1, 1024, 256, 256, false, true));    // projections, x Wᵀ
  EXPECT_TRUE(has(4, 1, 256, 1024, 1024, true, false));    // FFN linear2's dW
  EXPECT_TRUE(has(1, 1, 1024, 64, 256, false, true));      // generator
  EXPECT_TRUE(has(6, 256, 32, 32, 32, false, true));       // Q Kᵀ per head
  EXPECT_EQ(g.size(), 4u * 3 + 6);
}

}  // namespace
}  // namespace attograd
