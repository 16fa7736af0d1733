// examples/higher_order, run as a reader runs it: its Hessian-vector product
// agrees with finite differences of the gradient, training with the gradient
// penalty brings both the loss and the penalty down, and --dot writes the
// double-backward graph, larger than the forward graph it contains.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "examples/common/backprop_views.h"
#include "test_util.h"

namespace attograd::app {
namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/higher_order";

TEST(HigherOrderExample, HessianVectorProductPenaltyAndGraph) {
  ASSERT_TRUE(std::filesystem::exists(kProgram)) << "build the higher_order target first";
  testing::TempDir tmp("higher_order");
  const std::string dot_path = tmp.path + "/penalty.dot";
  const testing::ProgramOutcome r = testing::run_program(kProgram, {"--dot", dot_path}, tmp.path);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");

  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(max \|Hv - finite differences\| / max \|Hv\| = (\S+))")))
      << r.out;
  EXPECT_LT(std::stod(m[1]), 1e-7) << r.out;

  std::vector<double> losses, penalties;
  const std::regex step_line(R"(^step +\d+  loss (\d+\.\d+)  penalty (\d+\.\d+)$)");
  for (const std::string& line : testing::lines_of(r.out))
    if (std::regex_match(line, m, step_line)) {
      losses.push_back(std::stod(m[1]));
      penalties.push_back(std::stod(m[2]));
    }
  ASSERT_GE(penalties.size(), 3u) << r.out;
  EXPECT_GT(penalties.front(), 0.0) << r.out;
  EXPECT_LT(penalties.back(), 0.5 * penalties.front()) << r.out;
  EXPECT_LT(losses.back(), losses.front()) << r.out;

  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(graph of the loss \(forward\): (\d+) vertices; of the penalty \(forward \+ recorded backward\): (\d+))")))
      << r.out;
  const int forward_vertices = std::stoi(m[1]), penalty_vertices = std::stoi(m[2]);
  EXPECT_GT(forward_vertices, 0);
  EXPECT_GT(penalty_vertices, forward_vertices);

  // The file is the digraph the program counted: one vertex line per vertex,
  // every edge between declared vertices, the recorded backward's ops in it.
  const std::string dot = testing::read_text(dot_path);
  ASSERT_TRUE(dot.starts_with("digraph attograd {\n")) << dot;
  EXPECT_TRUE(dot.ends_with("}\n")) << dot;
  std::set<std::string> vertices;
  int edges = 0;
  const std::regex vertex(R"(^  (n\d+) \[label=.*\];$)"), edge(R"(^  (n\d+) -> (n\d+)( \[.*\])?;$)");
  for (const std::string& line : testing::lines_of(dot)) {
    if (std::regex_match(line, m, vertex)) vertices.insert(m[1]);
    else if (std::regex_match(line, m, edge)) {
      ++edges;
      EXPECT_TRUE(vertices.contains(m[1]) && vertices.contains(m[2])) << line;
    }
  }
  EXPECT_EQ(static_cast<int>(vertices.size()), penalty_vertices) << dot;
  EXPECT_GE(edges, penalty_vertices - 1) << dot;
  EXPECT_NE(dot.find("label=\"x\\n[64, 3] f64\""), std::string::npos) << dot;
  EXPECT_NE(dot.find("label=\"normal_cdf\\n"), std::string::npos) << "gelu's recorded backward" << dot;

  const std::string graphviz = find_on_path("dot");
  if (graphviz.empty()) GTEST_SKIP() << "Graphviz's dot is not on PATH: the file was not rendered";
  const testing::ProgramOutcome svg = testing::run_program(graphviz, {"-Tsvg", dot_path}, tmp.path);
  EXPECT_EQ(svg.code, 0) << svg.err;
  EXPECT_NE(svg.out.find("<svg"), std::string::npos) << svg.err;
}

TEST(HigherOrderExample, BadFlagIsOneLineError) {
  testing::TempDir tmp("higher_order_bad");
  testing::expect_one_line_error(testing::run_program(kProgram, {"--steps", "0"}, tmp.path), "higher_order",
                                 "--steps must be in [1, 100000], got 0");
  testing::expect_one_line_error(testing::run_program(kProgram, {"--dot", tmp.path + "/no/such/dir/g.dot"}, tmp.path),
                                 "higher_order", "--dot: cannot open");
}

}  // namespace
}  // namespace attograd::app
