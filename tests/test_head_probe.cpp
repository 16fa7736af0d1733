// head_probe lm (examples/head_probe/lm_probe.h) and the generic head tools
// under it (examples/heads_study/head_stats.h) on a tiny GPT: the baseline is
// lm eval's loss, an ablation is the loss of its mask, the pruning curves end
// at the intact and the headless model, the normalised importance has unit
// norm per layer, the attention statistics on hand-made weights, a GQA model,
// and the program end to end on a checkpoint lm trains.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <attograd/data/lm_tokenizer.h>
#include <attograd/dist/communicator.h>
#include "examples/head_probe/lm_probe.h"
#include "examples/heads_study/head_stats.h"
#include "examples/lm/lm_task.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;
using attograd::testing::expect_one_line_error;
using attograd::testing::read_text;
using attograd::testing::run_program;
using attograd::testing::TempDir;
using attograd::testing::without_heads;
using attograd::testing::write_text;

namespace {

// Varied text with repeats (the induction score has earlier occurrences to find).
std::string small_text() {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "from", "home"};
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += words[(i * 7 + i / 13) % 13];
    text += i % 11 == 10 ? ".\n" : " ";
  }
  return text;
}

struct TinyLM {
  std::unique_ptr<LMTokenizer> tok;
  std::unique_ptr<TokenWindows> data;
  std::unique_ptr<GPT> model;
};

// A GPT of 2 blocks and 4 heads (G K/V heads) with random weights, in f64,
// on small_text's held-out tail (context 8).
TinyLM tiny_lm(int64_t kv_heads = 4) {
  TinyLM t;
  const std::string text = small_text();
  t.tok = train_lm_tokenizer(text, {});
  t.data = std::make_unique<TokenWindows>(t.tok->encode(text), 8, 0.2);
  GPTConfig c;
  c.vocab = t.tok->vocab_size();
  c.context = 8;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.d_ff = 32;
  c.layers = 2;
  Generator gen(3);
  t.model = std::make_unique<GPT>(c, gen);
  t.model->to(DType::f64);
  t.model->eval();
  return t;
}

}  // namespace

TEST(HeadProbe, BaselineAblationPruningAndImportanceAgreeWithTheirDefinitions) {
  TinyLM t = tiny_lm();
  const int64_t windows = 20, batch = 6;  // 4 batches, the last one short
  const std::vector<LMBatch> batches = probe::heldout_batches(*t.data, windows, batch);
  ASSERT_EQ(batches.size(), 4u);
  probe::ProbeOptions o;
  o.random_orders = 2;
  const nlohmann::json j = probe::probe_lm(*t.model, batches, o);

  // The baseline is lm eval's loss on the same windows.
  const LMEval e = evaluate_lm(*t.model, *t.data, *t.tok, windows, batch, dist::world());
  EXPECT_DOUBLE_EQ(j["baseline_loss"].get<double>(), e.loss);
  EXPECT_EQ(j["tokens"].get<int64_t>(), e.tokens);

  // One head's ablation is the loss of the mask removing it (and only it).
  const heads::LossBatches loss = probe::lm_loss(*t.model, batches);
  const auto& hs = j["heads"];
  ASSERT_EQ(hs.size(), 8u);
  for (const auto& h : hs) {
    const HeadRef head{h["module"].get<std::string>(), h["head"].get<int64_t>()};
    const double masked = masked_loss(*t.model, loss, without_heads(full_head_mask(*t.model), {head}));
    EXPECT_DOUBLE_EQ(h["ablation_loss"].get<double>(), masked) << h["module"] << " head " << h["head"];
    EXPECT_DOUBLE_EQ(h["ablation_delta"].get<double>(), masked - e.loss);
    EXPECT_NE(h["ablation_delta"].get<double>(), 0.0);
  }

  // Normalised importance: unit L2 norm within each layer, the raw values scaled.
  for (int64_t layer = 0; layer < 2; ++layer) {
    double norm = 0, raw = 0;
    for (const auto& h : hs)
      if (h["layer"] == layer) {
        norm += std::pow(h["importance_normalized"].get<double>(), 2);
        raw += std::pow(h["importance"].get<double>(), 2);
      }
    EXPECT_NEAR(norm, 1.0, 1e-12) << "layer " << layer;
    for (const auto& h : hs) {
      if (h["layer"] != layer) continue;
      EXPECT_NEAR(h["importance_normalized"].get<double>(), h["importance"].get<double>() / std::sqrt(raw), 1e-12);
    }
  }

  // Pruning: 11 points per order, k = round(f·8); f = 0 is the baseline, f = 1
  // the model with every head masked (each block left with its residual path).
  const auto& p = j["pruning"];
  EXPECT_EQ(p["removed"], nlohmann::json({0, 1, 2, 2, 3, 4, 5, 6, 6, 7, 8}));
  const double headless = masked_loss(*t.model, loss, without_heads(full_head_mask(*t.model), [&] {
    std::vector<std::pair<std::string, int64_t>> all;
    for (const auto& h : hs) all.emplace_back(h["module"].get<std::string>(), h["head"].get<int64_t>());
    return all;
  }()));
  EXPECT_NE(headless, e.loss);
  ASSERT_EQ(p["orders"].size(), 5u);  // importance, importance_normalized, ablation, random-1, random-2
  for (const auto& order : p["orders"]) {
    ASSERT_EQ(order["loss"].size(), 11u) << order["name"];
    EXPECT_DOUBLE_EQ(order["loss"][0].get<double>(), e.loss) << order["name"];
    EXPECT_DOUBLE_EQ(order["loss"][10].get<double>(), headless) << order["name"];
  }
  // The ablation order removes the cheapest head first: its first point is that head's ablation loss.
  double cheapest = INFINITY;
  for (const auto& h : hs) cheapest = std::min(cheapest, h["ablation_loss"].get<double>());
  EXPECT_EQ(p["orders"][2]["name"], "ablation");
  EXPECT_DOUBLE_EQ(p["orders"][2]["loss"][1].get<double>(), cheapest);
  EXPECT_NE(p["orders"][3]["heads"], p["orders"][4]["heads"]);  // two different random orders
  for (const auto& [name, m] : attention_modules(*t.model)) EXPECT_FALSE(m->observer) << name;
}

// Importance is |∂L/∂ξ_h| of the mean next-token loss: central differences of
// the masked loss in one head's gate, on one batch (float64).
TEST(HeadProbe, ImportanceIsTheGateGradientOfTheNextTokenLoss) {
  TinyLM t = tiny_lm();
  const std::vector<LMBatch> batches = probe::heldout_batches(*t.data, 5, 5);
  const heads::LossBatches loss = probe::lm_loss(*t.model, batches);
  const HeadMask full = full_head_mask(*t.model);
  const std::vector<HeadImportance> imp = head_importance(*t.model, loss, full);
  ASSERT_EQ(imp.size(), 8u);
  for (const HeadImportance& h : imp) {
    const double eps = 1e-5;
    HeadMask up = full, down = full;
    up.at(h.module)[static_cast<size_t>(h.head)] += eps;
    down.at(h.module)[static_cast<size_t>(h.head)] -= eps;
    const double numeric = std::abs(masked_loss(*t.model, loss, up) - masked_loss(*t.model, loss, down)) / (2 * eps);
    EXPECT_NEAR(h.importance, numeric, 1e-8 + 1e-6 * numeric) << h.module << " head " << h.head;
  }
}

// Without the causal mask (the mask study's control) a head can read ahead: on
// hand-made weights over T = 4 positions, head 0 puts all of row t on t + 1
// (the last row, which has no next key, on itself), head 1 splits each row
// evenly over the four keys.
TEST(HeadProbe, NextTokenMassOfAHeadWithoutTheCausalMask) {
  const int64_t T = 4;
  std::vector<double> w(2 * T * T, 0.0);  // [1, 2, T, T]
  for (int64_t t = 0; t < T; ++t) {
    w[static_cast<size_t>(t * T + std::min(t + 1, T - 1))] = 1.0;
    for (int64_t s = 0; s < T; ++s) w[static_cast<size_t>(T * T + t * T + s)] = 0.25;
  }
  HeadStatistics st;
  st.add("attn", Tensor::from_vector(w, {1, 2, T, T}, DType::f64));
  const std::vector<HeadStat> r = st.results();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_DOUBLE_EQ(r[0].next, 3.0 / 4);  // rows 0..2; row 3 has no key t + 1
  EXPECT_DOUBLE_EQ(r[0].self, 1.0 / 4);
  EXPECT_DOUBLE_EQ(r[0].previous, 0.0);
  EXPECT_DOUBLE_EQ(r[1].next, 0.25 * 3 / 4);
  EXPECT_DOUBLE_EQ(r[1].previous, 0.25 * 3 / 4);
  // Reading ahead by two: rows 0 and 1 have a key t + 2, each with a quarter of its mass.
  EXPECT_EQ(r[1].offset, 2);  // keys t - 2 (rows 2, 3) weigh the same as t + 2: the tie keeps the one behind
  EXPECT_DOUBLE_EQ(r[1].offset_mass, 0.25 * 2 / 4);
}

// On hand-made weights over the tokens a b c a b c (T = 6, causal): head 0
// attends to the previous token (row 0 to itself), head 1 is an induction head
// (rows 3..5 attend to s = t - 2, the token after the earlier occurrence of
// token t; rows 0..2, which have none, attend to position 0).
TEST(HeadProbe, AttentionStatisticsOfPreviousTokenAndInductionHeads) {
  const int64_t T = 6;
  std::vector<double> w(2 * T * T, 0.0);  // [1, 2, T, T]
  for (int64_t t = 0; t < T; ++t) {
    w[static_cast<size_t>(t * T + std::max<int64_t>(t - 1, 0))] = 1.0;
    w[static_cast<size_t>(T * T + t * T + (t >= 3 ? t - 2 : 0))] = 1.0;
  }
  HeadStatistics st;
  st.add("attn", Tensor::from_vector(w, {1, 2, T, T}, DType::f64), Tensor(), Tensor(), /*causal=*/true,
         Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 1, 2, 3}, {1, T}));
  const std::vector<HeadStat> r = st.results();
  ASSERT_EQ(r.size(), 2u);
  const double rows = static_cast<double>(T);
  // Rows 3..5 each have one induction key among t + 1 visible ones.
  const double chance = (1.0 / 4 + 1.0 / 5 + 1.0 / 6) / rows;
  EXPECT_DOUBLE_EQ(r[0].previous, (rows - 1) / rows);  // every row but t = 0, which has no previous token
  EXPECT_DOUBLE_EQ(r[0].self, 1.0 / rows);
  EXPECT_DOUBLE_EQ(r[0].next, 0.0);  // a causal head cannot read ahead
  EXPECT_DOUBLE_EQ(r[0].first, 2.0 / rows);  // rows 0 and 1
  EXPECT_DOUBLE_EQ(r[0].mean_distance, (rows - 1) / rows);
  EXPECT_DOUBLE_EQ(r[0].induction, 0.0);  // no token repeats its predecessor's predecessor here
  EXPECT_DOUBLE_EQ(r[0].induction_chance, chance);
  EXPECT_DOUBLE_EQ(r[1].induction, 3.0 / rows);
  EXPECT_DOUBLE_EQ(r[1].induction_chance, chance);
  EXPECT_DOUBLE_EQ(r[1].previous, 1.0 / rows);  // row 1's position 0 is its previous token
  EXPECT_DOUBLE_EQ(r[1].first, 3.0 / rows);
  EXPECT_DOUBLE_EQ(r[1].mean_distance, (0 + 1 + 2 + 2 + 2 + 2) / rows);
  EXPECT_DOUBLE_EQ(r[1].entropy, 0.0);
  // Head 1 reads two back at rows 2..5 (row 2's position 0 is t - 2); head 0
  // has no mass at |k| >= 2, so its best offset is the nearest behind, at 0.
  EXPECT_EQ(r[1].offset, 2);
  EXPECT_DOUBLE_EQ(r[1].offset_mass, 4.0 / rows);
  EXPECT_EQ(r[0].offset, 2);
  EXPECT_DOUBLE_EQ(r[0].offset_mass, 0.0);
  // Tokens that do not match the weights' rows are refused.
  attograd::testing::expect_error<ShapeError>(
      [&] { st.add("attn", Tensor::from_vector(w, {1, 2, T, T}, DType::f64), Tensor(), Tensor(), true,
                   Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {1, 3})); },
      {"tokens must be [1, 6]", "self-attention"});
}

// Grouped-query attention (2 K/V heads for 4 query heads): the gates scale
// query heads, so every query head is probed and its K/V head named.
TEST(HeadProbe, WorksOnAGroupedQueryModel) {
  TinyLM t = tiny_lm(2);
  const std::vector<LMBatch> batches = probe::heldout_batches(*t.data, 8, 4);
  probe::ProbeOptions o;
  o.random_orders = 1;
  const nlohmann::json j = probe::probe_lm(*t.model, batches, o);
  const LMEval e = evaluate_lm(*t.model, *t.data, *t.tok, 8, 4, dist::world());
  EXPECT_DOUBLE_EQ(j["baseline_loss"].get<double>(), e.loss);
  ASSERT_EQ(j["heads"].size(), 8u);
  for (const auto& h : j["heads"]) {
    EXPECT_EQ(h["kv_head"].get<int64_t>(), h["head"].get<int64_t>() / 2);
    EXPECT_NE(h["ablation_delta"].get<double>(), 0.0);
    EXPECT_GT(h["importance"].get<double>(), 0.0);
    EXPECT_GT(h["rows"].get<int64_t>(), 0);
  }
  EXPECT_EQ(j["pruning"]["orders"].size(), 4u);
}

// The program on a checkpoint lm trains: its baseline is lm eval's printed loss,
// and a missing --out, an unknown subcommand or a missing checkpoint is one error line and exit 2.
TEST(HeadProbe, ProgramOnATrainedCheckpoint) {
  const std::string lm = std::string(ATTOGRAD_BIN_DIR) + "/lm", probe = std::string(ATTOGRAD_BIN_DIR) + "/head_probe";
  ASSERT_TRUE(std::filesystem::exists(lm) && std::filesystem::exists(probe)) << "build the lm and head_probe targets";
  TempDir dir("head_probe");
  write_text(dir / "text.txt", small_text());
  const std::string ck = dir / "ck";
  const auto trained = run_program(lm, {"train", "--text", dir / "text.txt", "--context", "16", "--d-model", "16",
                                        "--heads", "2", "--d-ff", "32", "--layers", "2", "--batch-size", "4",
                                        "--steps", "6", "--warmup", "1", "--eval-every", "3", "--eval-size", "4",
                                        "--quiet", "--samples", "0", "--checkpoint-dir", ck, "--threads", "1"},
                                   dir.path);
  ASSERT_EQ(trained.code, 0) << trained.err;
  const auto eval = run_program(lm, {"eval", "--checkpoint", ck, "--eval-size", "5", "--threads", "1"}, dir.path);
  ASSERT_EQ(eval.code, 0) << eval.err;
  const auto probed = run_program(probe, {"lm", "--checkpoint", ck, "--eval-size", "5", "--random-orders", "2",
                                          "--threads", "1", "--out", dir / "probe.json"}, dir.path);
  ASSERT_EQ(probed.code, 0) << probed.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "probe.json"));
  EXPECT_NE(eval.out.find(fmt::format("loss {:.4f} ", j["baseline_loss"].get<double>())), std::string::npos)
      << eval.out << " vs " << j["baseline_loss"];
  EXPECT_EQ(j["config"]["heads"], 2);
  EXPECT_EQ(j["config"]["layers"], 2);
  EXPECT_EQ(j["step"], 6);
  EXPECT_EQ(j["windows"], 5);
  EXPECT_EQ(j["heads"].size(), 4u);
  EXPECT_EQ(j["importance"], "once, full model");
  expect_one_line_error(run_program(probe, {"lm", "--checkpoint", ck}, dir.path), "head_probe", "--out is required");
  expect_one_line_error(run_program(probe, {"nope"}, dir.path), "head_probe", "unknown subcommand 'nope'");
  expect_one_line_error(run_program(probe, {"lm", "--checkpoint", dir / "nowhere", "--out", dir / "p.json"}, dir.path),
                        "head_probe", "nowhere");
}
