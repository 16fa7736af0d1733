// examples/tour, the README's first program, run as a reader runs it: it
// succeeds quietly, its gradients are the ones the math gives, the loss goes
// down at every printed step, and gradcheck passes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "test_util.h"

namespace attograd {
namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/tour";

TEST(Tour, RunsAndLearns) {
  ASSERT_TRUE(std::filesystem::exists(kProgram)) << "build the tour target first";
  testing::TempDir tmp("tour");
  const testing::ProgramOutcome r = testing::run_program(kProgram, {}, tmp.path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");

  // y = Σ a² for a = [1, 2, 3]: 14, dy/da = 2a.
  EXPECT_NE(r.out.find("y = tensor(14.0000,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dy/da = tensor([2.0000, 4.0000, 6.0000],"), std::string::npos) << r.out;

  // Cross-entropy's gradient for a bias is the mean of softmax − one-hot: its entries sum to 0.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(fc2\.bias\.grad = tensor\(\[(\S+), (\S+)\])"))) << r.out;
  EXPECT_NE(std::stod(m[1]), 0.0);
  EXPECT_NEAR(std::stod(m[1]) + std::stod(m[2]), 0.0, 1e-4);

  std::vector<double> losses;
  const std::regex step_line(R"(^step +\d+  loss (\d+\.\d+)$)");
  for (const std::string& line : testing::lines_of(r.out))
    if (std::regex_match(line, m, step_line)) losses.push_back(std::stod(m[1]));
  ASSERT_GE(losses.size(), 3u) << r.out;
  EXPECT_NEAR(losses.front(), std::log(2.0), 0.1) << "an untrained 2-class model starts near ln 2";
  for (size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << r.out;
  EXPECT_LT(losses.back(), 0.2 * losses.front()) << r.out;

  EXPECT_NE(r.out.find("gradcheck of tanh (backward vs finite differences): passed\n"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace attograd
