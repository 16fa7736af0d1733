// copy_task's --graph-out and --trace-backward: the first step's graph as DOT
// (with parameter names and gradients; collapsed layers on request), its SVG
// when Graphviz's dot is installed (opened in headless Chromium when there is
// one), and the backward trace as a table or JSON lines. Training goes on.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "examples/common/backprop_views.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace attograd::app {
namespace {

using testing::contains;

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/copy_task";
const std::vector<std::string> kTiny = {"train", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--enc-layers",
                                        "2", "--dec-layers", "2", "--max-len", "10", "--symbols", "5",
                                        "--min-length", "2", "--max-length", "6", "--samples", "0", "--threads",
                                        "1", "--quiet", "--batch-size", "4", "--eval-size", "4", "--steps", "3",
                                        "--warmup", "0"};

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t p = s.find(part); p != std::string::npos; p = s.find(part, p + 1)) ++n;
  return n;
}

class BackpropViewsCli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(fs::exists(kProgram)) << "build the copy_task target first"; }
  testing::ProgramOutcome run(const std::vector<std::string>& extra) {
    std::vector<std::string> args = kTiny;
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_program(kProgram, args, dir_);
  }
  // The SVG of the copy-task model's graph, or "" (and the test skipped) without Graphviz.
  std::string svg_path() {
    if (find_on_path("dot").empty()) return "";
    const auto r = run({"--graph-out", dir_ + "/step.dot"});
    EXPECT_EQ(r.code, 0) << r.err;
    return dir_ + "/step.svg";
  }
  testing::TempDir tmp_{"backprop_views"};
  std::string dir_ = tmp_.path;
};

TEST_F(BackpropViewsCli, GraphOutWritesTheFirstStepAndTrainingGoesOn) {
  const auto r = run({"--graph-out", dir_ + "/step.dot", "--log", dir_ + "/log.jsonl"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "graph of this step: " + dir_ + "/step.dot")) << r.out;
  const std::string dot = testing::read_text(dir_ + "/step.dot");
  ASSERT_TRUE(dot.starts_with("digraph attograd {")) << dot;
  EXPECT_TRUE(contains(dot, "label=\"encoder.layers.1.self_attn.q_proj.weight\\n[16, 16] f32\\ngrad [16, 16] norm "));
  EXPECT_TRUE(contains(dot, "label=\"cross_entropy\\n[] f32\\ngrad [] norm 1\\nfreed "));
  EXPECT_TRUE(contains(testing::read_text(dir_ + "/log.jsonl"), "\"step\":3,\"tokens_per_s\""));  // trained to the end

  const auto folded = run({"--graph-out", dir_ + "/folded.dot", "--graph-collapse"});
  ASSERT_EQ(folded.code, 0) << folded.err;
  const std::string fdot = testing::read_text(dir_ + "/folded.dot");
  EXPECT_TRUE(contains(fdot, "label=\"encoder.layers.0-1: 2 identical blocks, drawn once\""));
  EXPECT_TRUE(contains(fdot, "label=\"decoder.layers.0-1: 2 identical blocks, drawn once\""));
  EXPECT_FALSE(contains(fdot, "layers.1."));
  EXPECT_LT(count(fdot, "[label="), count(dot, "[label="));
}

TEST_F(BackpropViewsCli, TraceBackwardAsTableAndJsonLines) {
  const auto table = run({"--trace-backward"});
  ASSERT_EQ(table.code, 0) << table.err;
  const auto lines = testing::lines_of(table.out);
  auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.starts_with("step  op"); });
  ASSERT_NE(header, lines.end()) << table.out;
  EXPECT_TRUE(contains(*(header + 1), "cross_entropy")) << *(header + 1);

  const auto jl = run({"--trace-backward=" + dir_ + "/trace.jsonl"});
  ASSERT_EQ(jl.code, 0) << jl.err;
  const auto rows = testing::lines_of(testing::read_text(dir_ + "/trace.jsonl"));
  ASSERT_GT(rows.size(), 100u);
  bool saw_named_leaf = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto j = nlohmann::json::parse(rows[i]);
    EXPECT_EQ(j["step"], i);
    saw_named_leaf = saw_named_leaf || j["name"] == "decoder.layers.0.cross_attn.k_proj.weight";
  }
  EXPECT_TRUE(saw_named_leaf);
}

TEST_F(BackpropViewsCli, CollapseNeedsGraphOut) {
  testing::expect_one_line_error(run({"--graph-collapse"}), "copy_task", "--graph-collapse needs --graph-out");
}

TEST_F(BackpropViewsCli, SvgIsWrittenWhenGraphvizIsInstalled) {
  const std::string svg = svg_path();
  if (svg.empty()) GTEST_SKIP() << "Graphviz's dot is not on PATH";
  const std::string text = testing::read_text(svg);
  EXPECT_TRUE(contains(text, "<svg")) << svg;
  EXPECT_TRUE(contains(text, ">cross_entropy</text>")) << svg;
  EXPECT_TRUE(contains(text, ">encoder.layers.0.self_attn.q_proj.weight</text>")) << svg;
  // Well-formed XML, when Debian's python3 is there to parse it.
  if (fs::exists("/usr/bin/python3")) {
    const auto r = testing::run_program("/usr/bin/python3", {"-c", "import sys, xml.etree.ElementTree as E; "
                                        "print(E.parse(sys.argv[1]).getroot().tag)", svg}, dir_);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, "{http://www.w3.org/2000/svg}svg\n");
  }
}

// Opens the SVG in headless Chromium and reads back the DOM it built: a file
// that is not well-formed SVG gives an XML parser error page instead.
TEST_F(BackpropViewsCli, SvgOpensInHeadlessChromium) {
  std::string browser;
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"})
    if (browser.empty()) browser = find_on_path(name);
  if (browser.empty()) GTEST_SKIP() << "no headless Chromium on PATH";
  const std::string svg = svg_path();
  if (svg.empty()) GTEST_SKIP() << "Graphviz's dot is not on PATH";
  const auto r = testing::run_program(browser, {"--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + svg},
                                      dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "<svg")) << r.out.substr(0, 500);
  EXPECT_FALSE(contains(r.out, "parsererror")) << r.out.substr(0, 500);
  EXPECT_TRUE(contains(r.out, "cross_entropy"));
}

}  // namespace
}  // namespace attograd::app
