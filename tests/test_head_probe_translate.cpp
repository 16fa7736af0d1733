// head_probe translate (examples/head_probe/translate_probe.h) on a tiny
// Seq2SeqTransformer with random weights: the baseline is translate's own
// teacher-forced evaluation loss, an ablation is the loss of its mask, each
// type's pruning curve removes exactly that type's heads, the normalised
// importance has unit norm per module, the cross-attention's sink and
// diagonal statistics on hand-made weights, and the program end to end on a
// checkpoint translate trains.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "examples/common/trainer.h"
#include "examples/head_probe/translate_probe.h"
#include "examples/heads_study/head_stats.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;
using namespace attograd::app::probe;
using attograd::testing::expect_one_line_error;
using attograd::testing::read_text;
using attograd::testing::run_program;
using attograd::testing::TempDir;
using attograd::testing::without_heads;
using attograd::testing::write_text;

namespace {

// 2 encoder and 2 decoder layers of 2 heads: 2 modules of each type, 12
// heads; f64, random weights, eval mode.
std::unique_ptr<Seq2SeqTransformer> tiny_model() {
  TransformerConfig c;
  c.src_vocab = 12;
  c.tgt_vocab = 11;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.dropout = 0.0;
  c.max_len = 16;
  Generator gen(5);
  auto m = std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
  m->to(DType::f64);
  attograd::testing::randomize_parameters(*m, 11, 0.6);  // away from the initialisation: heads that differ
  m->eval();
  return m;
}

// Sentence pairs of varied lengths (padding in every batch), ids past the specials.
VectorDataset pairs(int64_t n) {
  VectorDataset d;
  for (int64_t i = 0; i < n; ++i) {
    Example e;
    for (int64_t k = 0; k < 2 + i % 5; ++k) e.src.push_back(kNumSpecials + (i * 3 + k * 5) % 8);
    for (int64_t k = 0; k < 1 + (i * 2) % 6; ++k) e.tgt.push_back(kNumSpecials + (i + k * 7) % 7);
    d.add(e);
  }
  return d;
}

}  // namespace

TEST(HeadProbeTranslate, BaselineIsTranslatesTeacherForcedLoss) {
  auto model = tiny_model();
  const VectorDataset data = pairs(20);
  // The first 13 of 20, in batches of 4: the last batch short, the rest of the data unread.
  const std::vector<AblationBatch> batches = first_batches(data, 13, 4);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches.back().src.size(0), 1);
  VectorDataset first13;
  for (int64_t i = 0; i < 13; ++i) first13.add(data.get(i));
  EvalOptions eo;
  eo.batch_size = 5;  // another batching: the mean per token does not depend on it
  eo.max_examples = 13;
  eo.decode = false;
  const EvalResult e = evaluate(*model, first13, eo);
  const nlohmann::json j = probe_translate(*model, batches, {1, 1});
  EXPECT_NEAR(j["baseline_loss"].get<double>(), e.loss, 1e-12);
  EXPECT_EQ(j["tokens"].get<int64_t>(), e.tokens);
  // Reading more sentences changes it: the 13 are the ones measured.
  EXPECT_GT(std::abs(masked_heads_loss(*model, first_batches(data, 0, 4), kPadId) - e.loss), 1e-6);
}

TEST(HeadProbeTranslate, AblationPruningAndImportanceAgreeWithTheirDefinitions) {
  auto model = tiny_model();
  const std::vector<AblationBatch> batches = first_batches(pairs(12), 0, 5);
  const LossBatches loss = seq2seq_loss(*model, batches, kPadId);
  const nlohmann::json j = probe_translate(*model, batches, {3, 7});
  const double base = j["baseline_loss"].get<double>();

  EXPECT_EQ(j["types"], nlohmann::json({"encoder_self", "decoder_self", "decoder_cross"}));
  ASSERT_EQ(j["heads"].size(), 12u);  // 2 modules of each type, 2 heads each
  std::map<std::string, std::vector<HeadRef>> of_type;
  std::map<std::string, double> norm2;  // per module, Σ normalised²
  for (const auto& h : j["heads"]) {
    const std::string module = h["module"], type = h["type"];
    EXPECT_EQ(type, attention_type_name(attention_type_of(module)));
    EXPECT_NE(module.find("layers." + std::to_string(h["layer"].get<int>()) + "."), std::string::npos) << module;
    of_type[type].emplace_back(module, h["head"].get<int64_t>());
    norm2[module] += std::pow(h["importance_normalized"].get<double>(), 2);
    // An ablation is the loss with exactly that head's mask.
    const double masked =
        masked_loss(*model, loss, without_heads(full_head_mask(*model), {{module, h["head"].get<int64_t>()}}));
    EXPECT_NEAR(h["ablation_loss"].get<double>(), masked, 1e-12) << module;
    EXPECT_NEAR(h["ablation_delta"].get<double>(), masked - base, 1e-12);
    EXPECT_EQ(h.contains("diagonal"), type == "decoder_cross");
    EXPECT_EQ(h.contains("induction"), type == "decoder_self");
  }
  EXPECT_EQ(of_type["encoder_self"].size(), 4u);
  EXPECT_EQ(of_type["decoder_self"].size(), 4u);
  EXPECT_EQ(of_type["decoder_cross"].size(), 4u);
  EXPECT_EQ(norm2.size(), 6u);
  for (const auto& [module, n2] : norm2) EXPECT_NEAR(n2, 1.0, 1e-12) << module;

  // Each type's curves remove that type's heads only: at f = 0 the intact
  // model, at f = 1 the loss of the mask removing exactly them.
  const auto& by_type = j["pruning"]["by_type"];
  ASSERT_EQ(by_type.size(), 3u);
  std::set<double> at_one;
  for (const auto& [type, heads] : of_type) {
    const auto& p = by_type.at(type);
    EXPECT_EQ(p["heads"].get<size_t>(), heads.size());
    EXPECT_EQ(p["removed"].back().get<size_t>(), heads.size());
    const double all_removed = masked_loss(*model, loss, without_heads(full_head_mask(*model), heads));
    ASSERT_EQ(p["orders"].size(), 6u);  // importance, importance_normalized, ablation, random-1..3
    for (const auto& o : p["orders"]) {
      EXPECT_NEAR(o["loss"].front().get<double>(), base, 1e-12);
      EXPECT_NEAR(o["loss"].back().get<double>(), all_removed, 1e-12) << type << " " << o["name"];
      EXPECT_EQ(o["heads"].size(), heads.size());
      for (const auto& h : o["heads"]) EXPECT_EQ(h.size(), 2u);  // [layer, head]
    }
    at_one.insert(all_removed);
  }
  EXPECT_EQ(at_one.size(), 3u);  // three different types removed, three different losses
  // The ablation order of a type is its heads by Δloss, lowest first, and its
  // second point removes round(0.1·n) of them.
  const auto& cross = by_type["decoder_cross"]["orders"][2];
  EXPECT_EQ(cross["name"], "ablation");
  double previous = -1e300;
  for (const auto& lh : cross["heads"]) {
    const std::string module = "decoder.layers." + std::to_string(lh[0].get<int>()) + ".cross_attn";
    for (const auto& h : j["heads"])
      if (h["module"] == module && h["head"] == lh[1]) {
        EXPECT_GE(h["ablation_delta"].get<double>(), previous);
        previous = h["ablation_delta"].get<double>();
      }
  }
  // The global curves reach the model without any head.
  const auto& global = j["pruning"]["global"];
  EXPECT_EQ(global["heads"], 12);
  const double headless = masked_loss(*model, loss, without_heads(full_head_mask(*model), [&] {
    std::vector<HeadRef> all;
    for (const auto& [type, heads] : of_type) all.insert(all.end(), heads.begin(), heads.end());
    return all;
  }()));
  for (const auto& o : global["orders"]) {
    EXPECT_NEAR(o["loss"].back().get<double>(), headless, 1e-12);
    EXPECT_EQ(o["heads"].front().size(), 3u);  // [type, layer, head]
  }
}

TEST(HeadProbeTranslate, CrossAttentionSinkAndDiagonal) {
  // One sentence: T = 2 queries (a third padded), S = 4 keys (a fifth padded).
  // Head 0 puts each row on round(t·4/2) = 0, 2: all on the diagonal; head 1
  // on key 3, the last unpadded one (key 4 is padding and gets no weight).
  const Tensor qpad = Tensor::from_vector(std::vector<bool>{false, false, true}, {1, 3});
  const Tensor kpad = Tensor::from_vector(std::vector<bool>{false, false, false, false, true}, {1, 5});
  std::vector<double> w(2 * 3 * 5, 0.0);  // [1, 2, 3, 5]
  w[0 * 5 + 0] = 1;                     // head 0, t = 0 -> key 0
  w[1 * 5 + 2] = 1;                     // head 0, t = 1 -> key 2
  for (int t = 0; t < 3; ++t) w[(3 + t) * 5 + 3] = 1;  // head 1 -> key 3 (the padded row is not counted)
  HeadStatistics st;
  st.add("decoder.layers.0.cross_attn", Tensor::from_vector(w, {1, 2, 3, 5}, DType::f64), qpad, kpad);
  const auto r = st.results();
  EXPECT_DOUBLE_EQ(r[0].diagonal, 1.0);
  EXPECT_DOUBLE_EQ(r[0].last, 0.0);
  EXPECT_DOUBLE_EQ(r[1].last, 1.0);
  EXPECT_DOUBLE_EQ(r[1].diagonal, 0.5);  // key 3 is within ±1 of row 1's centre 2, not of row 0's 0
}

TEST(HeadProbeTranslate, ProgramOnATrainedCheckpoint) {
  const std::string bin = ATTOGRAD_BIN_DIR;
  const std::string translate = bin + "/translate", probe = bin + "/head_probe";
  ASSERT_TRUE(std::filesystem::exists(translate) && std::filesystem::exists(probe))
      << "build the translate and head_probe targets";
  TempDir dir("head_probe_translate");
  const std::string data = dir / "numbers";
  std::filesystem::create_directories(data);
  for (const auto& [split, n] : {std::pair<std::string, size_t>{"train", 400}, {"valid", 30}, {"test", 30}}) {
    const std::string text = read_text(std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers/" + split + ".tsv");
    std::string head;
    size_t lines = 0;
    for (size_t pos = 0; pos < text.size() && lines <= n; ++lines) {  // the header line and n pairs
      const size_t end = text.find('\n', pos);
      head += text.substr(pos, end - pos) + "\n";
      pos = end + 1;
    }
    write_text(data + "/" + split + ".tsv", head);
  }
  const std::string ck = dir / "ck";
  const auto trained = run_program(translate, {"train", "--lang", "fr", "--data", data, "--d-model", "16", "--heads",
                                               "2", "--d-ff", "32", "--enc-layers", "1", "--dec-layers", "1",
                                               "--max-len", "40", "--batch-size", "16", "--steps", "8", "--warmup",
                                               "1", "--eval-size", "8", "--quiet", "--samples", "0", "--threads", "1",
                                               "--checkpoint-dir", ck},
                                   dir.path);
  ASSERT_EQ(trained.code, 0) << trained.err;
  // translate eval's loss reads whole batches of 128, past --eval-size: both read the whole test part of 30.
  const auto eval = run_program(translate, {"eval", "--checkpoint", ck, "--data", data, "--split", "test",
                                            "--eval-size", "30", "--threads", "1"}, dir.path);
  ASSERT_EQ(eval.code, 0) << eval.err;
  const auto probed = run_program(probe, {"translate", "--checkpoint", ck, "--data", data, "--split", "test",
                                          "--sentences", "0", "--batch-size", "8", "--random-orders", "2",
                                          "--out", dir / "probe.json"}, dir.path);
  ASSERT_EQ(probed.code, 0) << probed.err;
  const nlohmann::json j = nlohmann::json::parse(read_text(dir / "probe.json"));
  EXPECT_NE(eval.out.find(fmt::format("loss {:.4f} ", j["baseline_loss"].get<double>())), std::string::npos)
      << eval.out << " vs " << j["baseline_loss"];
  EXPECT_EQ(j["sentences"], 30);
  EXPECT_EQ(j["split"], "test");
  EXPECT_EQ(j["heads"].size(), 6u);
  EXPECT_EQ(j["task"]["target"], "fr");
  for (const char* type : {"encoder_self", "decoder_self", "decoder_cross"})
    EXPECT_EQ(j["pruning"]["by_type"][type]["orders"].size(), 5u) << type;
  expect_one_line_error(run_program(probe, {"translate", "--checkpoint", ck}, dir.path), "head_probe",
                        "--out is required");
  expect_one_line_error(run_program(probe, {"translate", "--checkpoint", ck, "--split", "train", "--out",
                                            dir / "p.json"}, dir.path), "head_probe", "--split must be valid or test");
}
