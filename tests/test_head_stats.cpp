// Head statistics (examples/heads_study/head_stats.h): entropy, distance and
// peak on hand-made weights, the masks that decide which rows and keys count,
// head ablation through attention observers, and the pruning report over seeds.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/engine.h>
#include <attograd/data/loader.h>
#include "examples/heads_study/head_stats.h"
#include "examples/heads_study/study.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::app::heads;
using attograd::testing::expect_error;
using attograd::testing::lines_of;
using attograd::testing::read_text;

namespace {

Tensor weights(std::initializer_list<double> v, const Shape& s) { return Tensor::from_list(v, s, DType::f64); }

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.src_vocab = 9; c.tgt_vocab = 9; c.d_model = 8; c.heads = 2; c.d_ff = 16;
  c.enc_layers = 1; c.dec_layers = 1; c.dropout = 0.0; c.max_len = 16;
  return c;
}

Batch tiny_batch() {
  return collate({{{4, 5, 6, 7}, {4, 5, 6, 7}}, {{8, 4}, {8, 4}}, {{5, 6, 7}, {7, 6, 5}}});
}

}  // namespace

TEST(HeadStatistics, DiagonalAndUniformHeads) {
  // Head 0 attends to its own position, head 1 spreads evenly over 3 keys.
  const double u = 1.0 / 3;
  HeadStatistics st;
  st.add("m", weights({1, 0, 0, 0, 1, 0, 0, 0, 1, u, u, u, u, u, u, u, u, u}, {1, 2, 3, 3}));
  const auto r = st.results();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].module, "m");
  EXPECT_EQ(r[0].rows, 3);
  EXPECT_DOUBLE_EQ(r[0].entropy, 0);
  EXPECT_DOUBLE_EQ(r[0].mean_distance, 0);
  EXPECT_DOUBLE_EQ(r[0].max_weight, 1);
  EXPECT_NEAR(r[1].entropy, std::log(3.0), 1e-12);
  EXPECT_NEAR(r[1].uniform_entropy, std::log(3.0), 1e-12);
  EXPECT_NEAR(r[1].mean_distance, (1 + 2.0 / 3 + 1) / 3, 1e-12);  // rows t = 0, 1, 2
  EXPECT_NEAR(r[1].max_weight, u, 1e-12);
}

TEST(HeadStatistics, PaddingCausalityAndEmptyRows) {
  // T = S = 3; the last key and the last query are padding. Row 0 puts all
  // its weight on key 1 and row 1 on key 0: distance 1 each.
  HeadStatistics st;
  const Tensor qpad = Tensor::from_vector(std::vector<bool>{false, false, true}, {1, 3});
  const Tensor kpad = Tensor::from_vector(std::vector<bool>{false, false, true}, {1, 3});
  st.add("cross", weights({0, 1, 0, 1, 0, 0, 0.5, 0.5, 0}, {1, 1, 3, 3}), qpad, kpad);
  auto r = st.results();
  EXPECT_EQ(r[0].rows, 2);  // the padded query row is not counted
  EXPECT_DOUBLE_EQ(r[0].mean_distance, 1);
  EXPECT_NEAR(r[0].uniform_entropy, std::log(2.0), 1e-12);  // 2 visible keys

  // Causal: query t sees t + 1 keys; a fully masked row (all 0) is skipped.
  HeadStatistics causal;
  causal.add("self", weights({1, 0, 0, 0.5, 0.5, 0, 0, 0, 0}, {1, 1, 3, 3}), Tensor(), Tensor(), true);
  r = causal.results();
  EXPECT_EQ(r[0].rows, 2);
  EXPECT_NEAR(r[0].uniform_entropy, (std::log(1.0) + std::log(2.0)) / 2, 1e-12);
  EXPECT_NEAR(r[0].entropy, std::log(2.0) / 2, 1e-12);

  expect_error<ShapeError>([&] { st.add("cross", weights({1}, {1, 1, 1})); }, {"cross", "[B, H, T, S]"});
  expect_error<ShapeError>([&] { st.add("cross", weights({1, 1}, {1, 2, 1, 1})); }, {"had 1 heads before, now 2"});
}

TEST(HeadStatistics, FromAModelEveryModuleAndNoFutureWeight) {
  Generator gen(3);
  Seq2SeqTransformer model(tiny_config(), gen, nullptr);
  const Batch b = tiny_batch();
  HeadStatistics st;
  st.add_batch(model, b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);
  const auto r = st.results();
  ASSERT_EQ(r.size(), 3u * 2u);  // encoder self, decoder self, decoder cross; 2 heads each
  EXPECT_EQ(r[0].module, "encoder.layers.0.self_attn");
  EXPECT_EQ(r[2].module, "decoder.layers.0.self_attn");
  EXPECT_EQ(r[4].module, "decoder.layers.0.cross_attn");
  auto unpadded = [](const Tensor& pad) {
    int64_t n = 0;
    for (double p : pad.to_vector<double>()) n += p == 0;
    return n;
  };
  EXPECT_EQ(r[0].rows, unpadded(b.src_key_padding_mask));  // one row per real source position
  EXPECT_EQ(r[2].rows, unpadded(b.tgt_key_padding_mask));  // one row per real target position
  EXPECT_EQ(r[4].rows, unpadded(b.tgt_key_padding_mask));
  EXPECT_LT(r[2].rows, b.tgt_in.numel());
  for (const HeadStat& s : r) {
    EXPECT_GE(s.entropy, 0) << s.module;
    EXPECT_LE(s.entropy, s.uniform_entropy + 1e-6) << s.module << " head " << s.head;
  }
  // The causal mask enters before the softmax as -inf: every future weight is exactly 0.
  Tensor w;  // decoder self [B, H, T, T]
  {
    NoGradGuard no_grad;
    AttentionObserverGuard observe(model, [&](const std::string& name) -> AttentionObserver {
      if (name != "decoder.layers.0.self_attn") return nullptr;
      return [&](AttentionCall& call) { w = call.weights; };
    });
    model.forward(b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);
  }
  ASSERT_TRUE(w.defined());
  const auto v = w.to_vector<double>();
  const int64_t B = w.size(0), H = w.size(1), T = w.size(2);
  for (int64_t i = 0; i < B * H; ++i)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = t + 1; s < T; ++s) ASSERT_EQ(v[static_cast<size_t>((i * T + t) * T + s)], 0.0);
}

TEST(HeadAblation, RemovesOneHeadAtATimeAndRestoresTheObservers) {
  Generator gen(5);
  Seq2SeqTransformer model(tiny_config(), gen, nullptr);
  const Batch b = tiny_batch();
  const std::vector<AblationBatch> batches = {{b.src, b.tgt_in, b.tgt_out, b.src_key_padding_mask}};
  const auto modules = attention_modules(model);
  // A head whose output projection columns are zero contributes nothing, so
  // removing it is exactly free; the other heads are not.
  {
    NoGradGuard no_grad;
    Tensor w = modules[2].second->out_proj->weight;  // cross attention [E, E]
    const int64_t E = w.size(0), D = E / 2;
    for (int64_t r = 0; r < E; ++r)
      for (int64_t c = D; c < E; ++c) w.data<float>()[r * E + c] = 0.f;  // head 1 reads columns D..E
  }
  // An observer the caller had set before: ablation must leave it in place.
  int64_t calls = 0;
  modules[0].second->observer = [&calls](AttentionCall&) { ++calls; };
  double baseline = 0;
  const auto r = ablate_heads(model, batches, kPadId, &baseline);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_DOUBLE_EQ(baseline, masked_heads_loss(model, batches, kPadId));
  for (const HeadAblation& a : r) {
    EXPECT_DOUBLE_EQ(a.delta, a.loss - baseline);
    if (a.module == "decoder.layers.0.cross_attn" && a.head == 1) EXPECT_EQ(a.delta, 0.0);
    else EXPECT_NE(a.delta, 0.0) << a.module << " head " << a.head;
  }
  const int64_t seen = calls;
  masked_heads_loss(model, batches, kPadId);
  EXPECT_EQ(calls, seen + 1);
  for (size_t i = 1; i < modules.size(); ++i) EXPECT_FALSE(modules[i].second->observer) << modules[i].first;
}

// The FLOP count follows the architecture: sharing K/V heads (G < H) removes
// exactly the decoder K/V projection work, i.e. the weights it removes
// (2 FLOPs per weight per token: self-attention's over T target tokens,
// cross-attention's over S source tokens), times 3 for training.
TEST(HeadStatistics, FlopsPerTokenShrinkWithSharedKVHeadsAsTheWeightsDo) {
  TransformerConfig mha;
  mha.d_model = 16;
  mha.heads = 4;
  mha.d_ff = 32;
  mha.enc_layers = 1;
  mha.dec_layers = 2;
  TransformerConfig gqa = mha;
  gqa.kv_heads = 1;
  Generator g1(1), g2(1);
  const Seq2SeqTransformer a(mha, g1, nullptr), b(gqa, g2, nullptr);
  const double E = 16, removed_params = static_cast<double>(a.num_parameters() - b.num_parameters());
  const double removed_weights = removed_params * E / (E + 1);  // each removed output column has E weights + 1 bias
  const double S = 7, T = 5;
  const double saved = flops_per_target_token(mha, S, T) - flops_per_target_token(gqa, S, T);
  EXPECT_GT(saved, 0);
  EXPECT_NEAR(saved * T / 3, removed_weights * (T + S), 1e-9 * saved * T);
  EXPECT_DOUBLE_EQ(flops_per_target_token(mha, S, T), [&] {
    TransformerConfig c = mha;
    c.kv_heads = c.heads;
    return flops_per_target_token(c, S, T);
  }());
}

// Michel's importance is |∂L/∂ξ_h|: it matches central differences of the
// loss in the head's gate (float64), on the full model and with heads
// removed, and a head that cannot reach the output scores 0. A mask applied
// by HeadMaskGuard removes exactly the heads it zeroes.
TEST(HeadImportance, IsTheGateGradientAndHonoursTheMask) {
  Generator gen(11);
  Seq2SeqTransformer model(tiny_config(), gen, nullptr);
  model.to(DType::f64);
  const Batch b = tiny_batch();
  const std::vector<AblationBatch> batches = {{b.src, b.tgt_in, b.tgt_out, b.src_key_padding_mask}};
  const auto modules = attention_modules(model);
  {
    NoGradGuard no_grad;
    Tensor w = modules[2].second->out_proj->weight;  // cross attention [E, E]; head 1 reads columns D..E
    const int64_t E = w.size(0), D = E / 2;
    for (int64_t r = 0; r < E; ++r)
      for (int64_t c = D; c < E; ++c) w.data<double>()[r * E + c] = 0.0;
  }
  HeadMask mask = full_head_mask(model);
  ASSERT_EQ(mask.size(), 3u);
  EXPECT_EQ(removed_heads(mask), 0);
  auto loss_at = [&](const HeadMask& m) {
    HeadMaskGuard guard(model, m);
    return masked_heads_loss(model, batches, kPadId);
  };
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) mask["encoder.layers.0.self_attn"][0] = 0.0;  // scored again at ξ = 0
    const std::vector<HeadImportance> imp = head_importance(model, batches, kPadId, mask);
    ASSERT_EQ(imp.size(), 6u);
    for (const HeadImportance& h : imp) {
      const double eps = 1e-5;
      HeadMask up = mask, down = mask;
      up[h.module][static_cast<size_t>(h.head)] += eps;
      down[h.module][static_cast<size_t>(h.head)] -= eps;
      const double numeric = std::abs(loss_at(up) - loss_at(down)) / (2 * eps);
      EXPECT_NEAR(h.importance, numeric, 1e-7 + 1e-6 * numeric) << h.module << " head " << h.head << " pass " << pass;
    }
    EXPECT_EQ(imp[5].module, "decoder.layers.0.cross_attn");
    EXPECT_EQ(imp[5].importance, 0.0);
    EXPECT_NEAR(imp[4].normalized, 1.0, 1e-12);  // the module's only non-zero head
  }
  EXPECT_EQ(removed_heads(mask), 1);
  // The mask's loss is the ablation's loss for that head.
  double baseline = 0;
  const auto ablation = ablate_heads(model, batches, kPadId, &baseline);
  EXPECT_DOUBLE_EQ(loss_at(mask), ablation[0].loss);
  EXPECT_DOUBLE_EQ(loss_at(full_head_mask(model)), baseline);
  for (const auto& [name, m] : modules) EXPECT_FALSE(m->observer) << name;  // the guards restored them
}

TEST(PruningReport, MeansOverSeedsWithTheirIntervalAndRefusesModelsOfAnotherShape) {
  const Corpus corpus = load_corpus(std::string(ATTOGRAD_SOURCE_DIR) + "/data/numbers", "fr");
  attograd::testing::TempDir dir("pruning");
  StudyOptions o;
  o.out_dir = dir.path;
  // A model of 6 heads pruned one at a time, twice per order; exact match em, em - 10.
  auto run = [](uint64_t seed, double em, int64_t levels = 2) {
    PruningRun r;
    r.seed = seed;
    r.total_heads = 6;
    r.modules = 3;
    r.step = 1;
    for (const char* order : {"importance", "ablation", "random"})
      for (int64_t k = 0; k < levels; ++k)
        r.points.push_back({order, k, static_cast<double>(k) / 6, em - 10.0 * static_cast<double>(k), 50});
    return r;
  };
  write_pruning_report(o, corpus, 2, {run(1, 90), run(2, 80)});
  const std::string md = read_text(dir / "pruning-fr.md");
  EXPECT_NE(md.find("seeds 1, 2"), std::string::npos) << md;
  // Two models at 90 and 80: the mean 85 between the two values, the interval their range.
  EXPECT_NE(md.find("| 0 | 0% | 85.0 [80.0, 90.0] | 50.0 [50.0, 50.0] |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | 17% | 75.0 [70.0, 80.0] |"), std::string::npos) << md;
  const auto lines = lines_of(read_text(dir / "pruning-fr.jsonl"));
  ASSERT_EQ(lines.size(), 12u);  // 2 models x 3 orders x 2 points
  EXPECT_EQ(nlohmann::json::parse(lines.front())["seed"], 1);
  EXPECT_EQ(nlohmann::json::parse(lines.back())["seed"], 2);

  write_pruning_report(o, corpus, 2, {run(3, 70)});  // one model: bare values
  EXPECT_NE(read_text(dir / "pruning-fr.md").find("| 0 | 0% | 70.0 | 50.0 |"), std::string::npos);
  expect_error<ValueError>([&] { write_pruning_report(o, corpus, 2, {run(1, 90), run(2, 80, 3)}); },
                           {"write_pruning_report", "seed 2", "seed 1"});
  expect_error<ValueError>([&] { write_pruning_report(o, corpus, 2, {}); }, {"no pruning runs"});
}
