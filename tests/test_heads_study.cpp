// heads_study --quick end to end, as a subprocess: every output is produced
// and well formed (one table row per setting, one JSON line per run, a head
// table covering every head, pictures, a KV-cache benchmark whose outputs agree
// and whose cache size matches its formula, learning curves, both axes of H,
// the composition split, the plots of tools/plot_heads.py when Debian's
// python3 has matplotlib, the grouped-query experiment's models with their
// caches and logits, the causal-mask experiment's rows). Labelled "slow".
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "examples/common/checkpoint.h"
#include <attograd/nn/transformer.h>
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

  // curves-fr.jsonl: one line per run of both axes (constant E = 32: H = 1, 2;
  // constant D = 16: E = 16, 32 with F = 4E), each with a learning curve from
  // step 0 every 10 steps to the budget of 40, and scores in range.
  std::set<std::tuple<int64_t, int64_t, int64_t>> shapes;
  for (const std::string& line : lines_of(read_text(out + "/curves-fr.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    shapes.insert({j["heads"].get<int64_t>(), j["d_model"].get<int64_t>(), j["d_ff"].get<int64_t>()});
    EXPECT_EQ(j["curve"]["step"].get<std::vector<int64_t>>(), (std::vector<int64_t>{0, 10, 20, 30, 40})) << line;
    for (const char* k : {"valid_token_accuracy", "valid_loss"}) EXPECT_EQ(j["curve"][k].size(), 5u) << k;
    for (double a : j["curve"]["valid_token_accuracy"].get<std::vector<double>>()) {
      EXPECT_GE(a, 0);
      EXPECT_LE(a, 100);
    }
    for (double l : j["curve"]["valid_loss"].get<std::vector<double>>()) EXPECT_GT(l, 0);
    EXPECT_GE(j["gen_exact_match"].get<double>(), 0);
    EXPECT_LE(j["gen_exact_match"].get<double>(), 100);
  }
  const std::set<std::tuple<int64_t, int64_t, int64_t>> want = {{1, 32, 64}, {2, 32, 64}, {1, 16, 64}, {2, 32, 128}};
  EXPECT_EQ(shapes, want);

  // curves-fr.md: a row per H with intervals, and the paired difference of H = 1 → 2 (one seed, one pair).
  const std::string curves_md = read_text(out + "/curves-fr.md");
  const std::string ci = R"([0-9.]+ \[[0-9.]+, [0-9.]+\])";
  EXPECT_EQ(count_matches(curves_md, std::regex(R"(\| [12] \| (32|16) \| 1 \| )" + ci + R"( \| )" + ci)), 2) << curves_md;
  EXPECT_EQ(count_matches(curves_md, std::regex(R"(\| 1 \| 2 \| 1 \| [-+][0-9.]+ \[)")), 1) << curves_md;

  // axes.md: both axes (E: two shapes, D: two shapes) with a measured step time, and a critical H per budget.
  const std::string axes = read_text(out + "/axes.md");
  EXPECT_EQ(count_matches(axes, std::regex(R"(\| E \| [12] \| \d+ \| 32 \| 64 \| 1 \| \d+ \| [0-9.]+ \| [0-9.]+ \|)")), 2)
      << axes;
  EXPECT_EQ(count_matches(axes, std::regex(R"(\| D \| [12] \| 16 \| (16|32) \| (64|128) \| 1 \| \d+ \| [0-9.]+ \| [0-9.]+ \|)")),
            2) << axes;
  EXPECT_EQ(count_matches(axes, std::regex(R"(\| [ED] \| \d+ steps(, test exact match)? \| [12] \(.*\) \| [12] \|)")), 8)
      << axes;
  const auto timing = lines_of(read_text(out + "/axes.jsonl"));
  ASSERT_EQ(timing.size(), 4u);
  for (const std::string& line : timing) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step_ms"].size(), 2u);  // the quick study's 2 interleaved rounds
    EXPECT_GT(j["median_ms"].get<double>(), 0);
  }
  // composition.md: gen against test for each of the 4 shapes.
  const std::string comp = read_text(out + "/composition.md");
  EXPECT_EQ(count_matches(comp, std::regex(R"(\| fr \| (E|D|E, D) \| [12] \| \d+ \| \d+ \| 1 \| )" + ci)), 4) << comp;

  // The plots, when Debian's python3 has matplotlib.
  if (run_program("/usr/bin/python3", {"-c", "import matplotlib"}, dir_).code == 0) {
    const auto p = run_program("/usr/bin/python3", {std::string(ATTOGRAD_SOURCE_DIR) + "/tools/plot_heads.py",
                                                    out + "/results.jsonl", "-o", out + "/heads.png", "--study", out},
                               dir_);
    ASSERT_EQ(p.code, 0) << p.err << p.out;
    for (const char* f : {"heads.png", "curves-fr.png", "steps-to-target.png", "axes.png", "pruning.png"})
      EXPECT_GT(fs::file_size(out + "/" + f), 1000u) << f;
  }

  // inspect-fr.md: a row for every head of every attention module (1+1 layers, 2 heads, inspected H = 2).
  const std::string inspect = read_text(out + "/inspect-fr.md");
  EXPECT_EQ(count_matches(inspect, std::regex(R"(\| (encoder|decoder)\.layers\.0\.\w+ \| \d \| )")), 3 * 2) << inspect;
  EXPECT_NE(inspect.find("Cheapest heads to remove"), std::string::npos);
  for (const char* f : {"index.html", "cross-L0-H1.svg", "dec-self-L0-H0.svg", "enc-self-L0-H1.svg"})
    EXPECT_TRUE(fs::exists(out + "/inspect-fr/input-1/" + f)) << f;

  // pruning-fr.jsonl: three orders, each from 0 removed heads (the same intact
  // score) in equal steps up to at most 90% of the 6 heads, scores in range.
  std::map<std::string, std::vector<nlohmann::json>> curves;
  for (const std::string& line : lines_of(read_text(out + "/pruning-fr.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    curves[j["order"].get<std::string>()].push_back(j);
  }
  ASSERT_EQ(curves.size(), 3u);
  for (const auto& [order, pts] : curves) {
    ASSERT_EQ(pts.size(), 6u) << order;  // 0..5 heads removed, one (about 10% of 6) at a time
    for (size_t i = 0; i < pts.size(); ++i) {
      EXPECT_EQ(pts[i]["removed"].get<int64_t>(), static_cast<int64_t>(i)) << order;
      EXPECT_DOUBLE_EQ(pts[i]["fraction"].get<double>(), static_cast<double>(i) / 6) << order;
      EXPECT_GE(pts[i]["bleu"].get<double>(), 0);
      EXPECT_LE(pts[i]["exact_match"].get<double>(), 100);
    }
    EXPECT_EQ(pts[0]["bleu"], curves.begin()->second[0]["bleu"]) << order;
  }
  EXPECT_NE(read_text(out + "/pruning-fr.md").find("| removed | fraction | importance EM"), std::string::npos);

  // roles-fr.md: the role study on the grid's inspected models (H = 2, one seed).
  EXPECT_NE(read_text(out + "/roles-fr.md").find("## Head roles, en→fr (H = 2, 1 seed(s), 32 test sentences)"),
            std::string::npos);
  EXPECT_EQ(count_matches(read_text(out + "/roles-fr.jsonl"), std::regex(R"("kind":"cross_head")")), 2);

  // kv-bench.md: outputs identical with and without the cache, bytes equal to the formula.
  const std::string kv = read_text(out + "/kv-bench.md");
  const std::regex row(R"(\| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| yes \| (\d+) \| (\d+) \|)");
  int rows = 0;
  for (auto it = std::sregex_iterator(kv.begin(), kv.end(), row); it != std::sregex_iterator(); ++it, ++rows)
    EXPECT_EQ((*it)[2], (*it)[3]);
  EXPECT_EQ(rows, 2) << kv;

  // gqa-fr.jsonl: H = 8 with G = 8, 1, 2 from scratch, G = 1, 2 converted and uptrained; every
  // cache at the formula, G times the bytes of G = 1; cached logits equal the teacher-forced ones.
  std::map<std::pair<std::string, int64_t>, nlohmann::json> gqa;
  for (const std::string& line : lines_of(read_text(out + "/gqa-fr.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    gqa[{j["how"].get<std::string>(), j["kv_heads"].get<int64_t>()}] = j;
  }
  ASSERT_EQ(gqa.size(), 7u);
  for (const auto& [key, j] : gqa) {
    EXPECT_EQ(j["heads"], 8);
    EXPECT_EQ(j["steps"], key.first == "scratch" ? 40 : key.first == "converted" ? 0 : 2) << key.first;
    ASSERT_EQ(j["cache"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      const auto& c = j["cache"][i];
      EXPECT_EQ(c["t"], i == 0 ? 8 : 16);
      EXPECT_EQ(c["bytes_used"], c["bytes_formula"]);
      EXPECT_GE(c["bytes_allocated"].get<int64_t>(), c["bytes_used"].get<int64_t>());
      EXPECT_EQ(c["bytes_used"].get<int64_t>(),
                key.second * gqa.at({"scratch", 1})["cache"][i]["bytes_used"].get<int64_t>());
      EXPECT_GT(c["ms_per_token"].get<double>(), 0);
    }
    EXPECT_GT(j["max_abs_logit"].get<double>(), 0);
    EXPECT_LT(j["max_logit_diff"].get<double>(), 1e-4 * std::max(1.0, j["max_abs_logit"].get<double>()));
    EXPECT_LE(j["exact_match"].get<double>(), 100);
  }
  EXPECT_FALSE(gqa.contains({"converted", 8}));
  EXPECT_NE(read_text(out + "/gqa-fr.md").find("| uptrained | 2 | 1 |"), std::string::npos);

  // mask-fr.jsonl: the wasted share (T − 1) / 2T at T = 8, 16, and the pair trained with and without the mask.
  std::vector<nlohmann::json> work, trained;
  for (const std::string& line : lines_of(read_text(out + "/mask-fr.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    (j["part"] == "work" ? work : trained).push_back(j);
  }
  ASSERT_EQ(work.size(), 2u);
  for (const auto& w : work) {
    const int64_t T = w["T"].get<int64_t>();
    EXPECT_EQ(w["computed"], T * T);
    EXPECT_EQ(w["needed"], T * (T + 1) / 2);
    EXPECT_DOUBLE_EQ(w["wasted"].get<double>(), static_cast<double>(T - 1) / static_cast<double>(2 * T));
  }
  ASSERT_EQ(trained.size(), 2u);
  EXPECT_EQ(trained[0]["causal"], true);
  EXPECT_EQ(trained[1]["causal"], false);
  for (const auto& t : trained) EXPECT_GT(t["loss"].get<double>(), 0);
  EXPECT_NE(read_text(out + "/mask-fr.md").find("| no mask |"), std::string::npos);
}

TEST_F(HeadsStudy, QuickRolesWritesAlignmentScoresAndMatches) {
  // --quick --roles: two tiny H = 4 models (1 + 1 layers), 32 gold-aligned test sentences, 16 scored valid ones.
  const std::string out = dir_ + "/roles";
  const auto r = run_program(kProgram, {"--quick", "--roles", "--out", out, "--data", kData, "--seeds", "2"}, dir_);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");
  std::map<std::string, std::vector<nlohmann::json>> kinds;
  for (const std::string& line : lines_of(read_text(out + "/roles-fr.jsonl"))) {
    const auto j = nlohmann::json::parse(line);
    kinds[j["kind"].get<std::string>()].push_back(j);
  }
  auto in_order = [](const nlohmann::json& x, double lo, double hi) {
    return lo <= x["lo"].get<double>() && x["lo"].get<double>() <= x["value"].get<double>() &&
           x["value"].get<double>() <= x["hi"].get<double>() && x["hi"].get<double>() <= hi;
  };
  ASSERT_FALSE(kinds["baseline"].empty());
  EXPECT_EQ(kinds["baseline"][0]["role"], "content");
  for (const auto& b : kinds["baseline"]) {
    EXPECT_TRUE(in_order(b["diagonal"], 0, 100)) << b;
    EXPECT_TRUE(in_order(b["offset"], 0, 100)) << b;
  }
  ASSERT_EQ(kinds["cross_head"].size(), 2u * 4u);  // 2 seeds x 1 layer x 4 heads
  for (const auto& h : kinds["cross_head"]) {
    EXPECT_TRUE(in_order(h["accuracy"]["content"], 0, 100)) << h;
    EXPECT_TRUE(h["dedicated"].is_array());
  }
  ASSERT_EQ(kinds["head_score"].size(), 2u * 3u * 4u);  // encoder self, decoder self, cross
  for (const auto& h : kinds["head_score"]) {
    for (const char* k : {"importance", "fisher", "ablation", "entropy", "confidence"})
      EXPECT_TRUE(in_order(h[k], -1e9, 1e9)) << k << " " << h;
    EXPECT_TRUE(in_order(h["confidence"], 0, 1)) << h;
  }
  ASSERT_EQ(kinds["correlation"].size(), 2u * 10u);  // every pair of 5 scores, per seed
  for (const auto& c : kinds["correlation"]) EXPECT_TRUE(in_order(c["rho"], -1, 1)) << c;
  ASSERT_EQ(kinds["match"].size(), 4u);  // seed 2's cross heads, each matched to one of seed 1's
  std::set<int64_t> matched;
  for (const auto& m : kinds["match"]) matched.insert(m["seed1_head"].get<int64_t>());
  EXPECT_EQ(matched.size(), 4u) << "a matching is a permutation";
  ASSERT_EQ(kinds["match_summary"].size(), 1u);
  ASSERT_EQ(kinds["importance_control"].size(), 2u * 4u);  // valid/train x 1/64 sentences, per seed
  for (const auto& c : kinds["importance_control"]) {
    EXPECT_GE(c["rho_ablation"].get<double>(), -1);
    EXPECT_LE(c["rho_ablation"].get<double>(), 1);
  }

  const std::string md = read_text(out + "/roles-fr.md");
  for (const char* part : {"## Head roles, en→fr (H = 4, 2 seed(s), 32 test sentences)", "| content |",
                           "### Dedicated heads", "### Cross heads matched across seeds", "| importance vs fisher |"})
    EXPECT_NE(md.find(part), std::string::npos) << part << " not in:\n" << md;
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
      {{"--quick", "--roles", "--langs", "es"}, "gold alignments exist for fr and de, got 'es'"},
      {{"--quick", "--kv-bench", "--heads", "4", "--kv-heads", "3"}, "--kv-heads 3 does not divide the benchmarked heads 4"},
      {{"--convert-gqa", "/nonexistent/ckpt", "--kv-heads", "1"}, "--convert-gqa needs --kv-heads G and --to"},
      {{"--quick", "--gqa", "--mask"}, "give one of them"},
      {{"--quick", "--part", "3/2"}, "--part must be i/n with 1 <= i <= n <= 64, got '3/2'"},
      {{"--quick", "--lang-steps", "fr"}, "--lang-steps expects lang=N"},
      {{"--quick", "--width-heads", "0"}, "--width-heads must be in [1, 64], got 0"},
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

TEST_F(HeadsStudy, KVBenchShrinksTheCacheByHOverG) {
  const std::string out = dir_ + "/kv";
  const auto r = run_program(kProgram, {"--quick", "--kv-bench", "--out", out, "--data", kData, "--heads", "4",
                                        "--kv-heads", "4,2,1"}, dir_);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const std::string kv = read_text(out + "/kv-bench.md");
  // | G | length | ms | ms | speedup | yes | bytes used | formula | bytes allocated |
  const std::regex row(R"(\| (\d) \| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| yes \| (\d+) \| (\d+) \| (\d+) \|)");
  std::map<std::pair<int, int>, long long> used;
  for (auto it = std::sregex_iterator(kv.begin(), kv.end(), row); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ((*it)[3], (*it)[4]);
    EXPECT_GE(std::stoll((*it)[5]), std::stoll((*it)[3]));
    used[{std::stoi((*it)[1]), std::stoi((*it)[2])}] = std::stoll((*it)[3]);
  }
  ASSERT_EQ(used.size(), 6u) << kv;
  for (int len : {8, 16}) {
    const long long g4 = used[{4, len}], g2 = used[{2, len}], g1 = used[{1, len}];
    EXPECT_EQ(g4, 2 * g2);
    EXPECT_EQ(g4, 4 * g1);
  }
}

TEST_F(HeadsStudy, ConvertGqaPoolsTheDecoderKVProjections) {
  using namespace attograd;
  using namespace attograd::app;
  TransformerConfig c;
  c.src_vocab = 7;
  c.tgt_vocab = 9;
  c.d_model = 8;
  c.heads = 4;
  c.d_ff = 12;
  c.enc_layers = 1;
  c.dec_layers = 1;
  c.max_len = 16;
  Generator gen(3);
  const Seq2SeqTransformer model(c, gen, nullptr);
  CheckpointMeta meta{c.to_json(), std::vector<std::string>(7, "a"), std::vector<std::string>(9, "b"),
                      nlohmann::json{{"lang", "fr"}}};
  for (int i = 0; i < 7; ++i) meta.vocab_src[static_cast<size_t>(i)] += std::to_string(i);
  for (int i = 0; i < 9; ++i) meta.vocab_tgt[static_cast<size_t>(i)] += std::to_string(i);
  TrainProgress progress;
  progress.step = 5;
  save_checkpoint(dir_ + "/mha", model.state_dict(), {}, meta, progress, 1);

  const std::string out = dir_ + "/gqa.model.safetensors";
  const auto r = run_program(kProgram, {"--convert-gqa", dir_ + "/mha", "--kv-heads", "2", "--to", out}, dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("decoder K/V heads 4 -> 2"), std::string::npos) << r.out;
  const Checkpoint g = load_checkpoint(out, false);
  EXPECT_EQ(g.meta.config.at("kv_heads"), 2);
  EXPECT_EQ(g.meta.vocab_src, meta.vocab_src);
  EXPECT_EQ(g.meta.task, meta.task);
  const TensorMap before = model.state_dict();
  ASSERT_EQ(g.model.size(), before.size());
  for (const auto& [name, t] : before) {
    const bool pooled = name.starts_with("decoder.") && (name.find("k_proj") != std::string::npos ||
                                                         name.find("v_proj") != std::string::npos);
    const Tensor expect = pooled ? mean_pool_kv_heads(t, 4, 2) : t;
    EXPECT_EQ(g.model.at(name).to_vector<float>(), expect.to_vector<float>()) << name;
  }
  Seq2SeqTransformer loaded(TransformerConfig::from_json(g.meta.config), gen, nullptr);
  loaded.load_state_dict(g.model);  // the shapes fit a G = 2 model

  const auto bad = run_program(kProgram, {"--convert-gqa", dir_ + "/mha", "--kv-heads", "3", "--to", out}, dir_);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--kv-heads 3 must divide the model's heads 4"), std::string::npos) << bad.err;
}
