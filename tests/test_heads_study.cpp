// heads_study --quick end to end, as a subprocess: every output is produced
// and well formed (one table row per setting, one JSON line per run, a head
// table covering every head, pictures, a KV-cache benchmark whose outputs agree
// and whose cache size matches its formula). Labelled "slow".
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fs = std::filesystem;
using attograd::testing::lines_of;
using attograd::testing::read_text;
using attograd::testing::run_program;

namespace {

const std::string kProgram = std::string(ATTOGRAD_BIN_DIR) + "/heads_study";
const std::string kData = std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers";

class HeadsStudy : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kProgram)) << kProgram << " does not exist; build the heads_study target first";
  }
  attograd::testing::TempDir tmp_{"heads"};
  std::string dir_ = tmp_.path;
};

int count_matches(const std::string& text, const std::regex& re) {
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace

TEST_F(HeadsStudy, QuickRunWritesEveryOutput) {
  const std::string out = dir_ + "/study";
  const auto r = run_program(kProgram, {"--quick", "--out", out, "--data", kData, "--heads", "1,2"}, dir_);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");

  // heads.md: one row per (language, H), parameters equal across H (E is fixed).
  const std::string md = read_text(out + "/heads.md");
  std::smatch m1, m2;
  ASSERT_TRUE(std::regex_search(md, m1, std::regex(R"(\| fr \| 1 \| 32 \| [0-9.]+ ± [0-9.]+ \|.*\| (\d+) \| [0-9.]+ \|)")))
      << md;
  ASSERT_TRUE(std::regex_search(md, m2, std::regex(R"(\| fr \| 2 \| 16 \| [0-9.]+ ± [0-9.]+ \|.*\| (\d+) \| [0-9.]+ \|)")))
      << md;
  EXPECT_EQ(m1[1], m2[1]) << "the parameter count must not depend on the number of heads";

  // results.jsonl: one JSON object per run with every field.
  const auto runs = lines_of(read_text(out + "/results.jsonl"));
  ASSERT_EQ(runs.size(), 2u);
  for (const std::string& line : runs) {
    const auto j = nlohmann::json::parse(line);
    for (const char* k : {"lang", "heads", "seed", "exact_match", "bleu", "loss", "step_ms", "parameters",
                          "train_flops_per_token"})
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
    EXPECT_GT(j["step_ms"].get<double>(), 0);
    EXPECT_GE(j["bleu"].get<double>(), 0);
    EXPECT_LE(j["bleu"].get<double>(), 100);
  }
  EXPECT_EQ(read_text(out + "/heads.svg").rfind("<svg", 0), 0u);

  // inspect-fr.md: a row for every head of every attention module (1+1 layers, 2 heads, inspected H = 2).
  const std::string inspect = read_text(out + "/inspect-fr.md");
  EXPECT_EQ(count_matches(inspect, std::regex(R"(\| (encoder|decoder)\.layers\.0\.\w+ \| \d \| )")), 3 * 2) << inspect;
  EXPECT_NE(inspect.find("Cheapest heads to remove"), std::string::npos);
  for (const char* f : {"index.html", "cross-L0-H1.svg", "dec-self-L0-H0.svg", "enc-self-L0-H1.svg"})
    EXPECT_TRUE(fs::exists(out + "/inspect-fr/input-1/" + f)) << f;

  // kv-bench.md: outputs identical with and without the cache, bytes equal to the formula.
  const std::string kv = read_text(out + "/kv-bench.md");
  const std::regex row(R"(\| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| yes \| (\d+) \| (\d+) \|)");
  int rows = 0;
  for (auto it = std::sregex_iterator(kv.begin(), kv.end(), row); it != std::sregex_iterator(); ++it, ++rows)
    EXPECT_EQ((*it)[2], (*it)[3]);
  EXPECT_EQ(rows, 2) << kv;
}

TEST_F(HeadsStudy, BadFlagsGetOneLineAndExitCode2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--quick", "--full"}, "exclude each other"},
      {{"--quick", "--heads", "3"}, "--heads 3 does not divide d_model 32"},
      {{"--quick", "--seeds", "0"}, "--seeds must be in"},
      {{"--quick", "--data", "/nonexistent"}, "/nonexistent/train.tsv does not exist"},
      {{"--quick", "--langs", "xx"}, "unknown target language 'xx'"},
      {{"stray"}, "unexpected argument 'stray'"},
      {{"--inspect", "/nonexistent/ckpt"}, "/nonexistent/ckpt"},
  };
  for (const auto& [args, phrase] : cases) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--out", dir_ + "/o"});
    const auto r = run_program(kProgram, a, dir_);
    EXPECT_EQ(r.code, 2) << phrase << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << "'" << phrase << "' not in: " << r.err;
  }
}
