// Attention observers (attograd/nn/attention.h): what an observer sees of a forward
// (weights [B, H, T, S], per-head outputs [B, H, T, D]), head scaling against
// the head-mask formula it replaces and against a zeroed out_proj, its
// gradient, a forward without an observer bit for bit the composition of
// projections and attention, and the module walk and guard.
#include <gtest/gtest.h>

#include <attograd/autograd/gradcheck.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/autograd.h>
#include <attograd/nn/generate.h>
#include <attograd/nn/transformer.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_close;
using attograd::testing::expect_error;
using attograd::testing::randomize_parameters;

namespace {

// MultiHeadAttention's forward written out: project, split heads, attend,
// scale each head by `head_mask` [H] when given, merge heads, project out.
Tensor composed_forward(MultiHeadAttention& m, const Tensor& query, const Tensor& kv, const AttentionOptions& o,
                        const Tensor& head_mask = Tensor()) {
  const int64_t B = query.size(0), T = query.size(1), H = m.num_heads, D = m.head_dim;
  auto split = [&](const Tensor& x) { return x.reshape({B, x.size(1), H, D}).transpose(1, 2); };
  Tensor heads = scaled_dot_product_attention(split(m.q_proj->forward(query)), split(m.k_proj->forward(kv)),
                                              split(m.v_proj->forward(kv)), o)
                     .out;
  if (head_mask.defined()) heads = heads * head_mask.reshape({1, H, 1, 1});
  return m.out_proj->forward(heads.transpose(1, 2).reshape({B, T, m.embed_dim}));
}

}  // namespace

TEST(AttentionObserver, GroupedAttentionReportsEveryQueryHead) {
  // With G = 2 K/V heads for H = 4 query heads, the observer still sees one
  // weight matrix and one output per query head, and scales query heads.
  Generator gen(1), g(2);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 4, .num_kv_heads = 2, .dtype = DType::f64}, gen);
  const Tensor q = Tensor::randn({3, 4, 8}, g, DType::f64), kv = Tensor::randn({3, 5, 8}, g, DType::f64);
  Tensor weights, heads;
  const Tensor scale = Tensor::from_vector(std::vector<double>{1, 0, 1, 0.5}, {4}, DType::f64);
  mha.observer = [&](AttentionCall& c) {
    weights = c.weights;
    heads = c.heads;
    c.head_scale = scale;
  };
  const Tensor out = mha.forward(q, kv, kv).out;
  EXPECT_EQ(weights.shape(), (Shape{3, 4, 4, 5}));
  EXPECT_EQ(heads.shape(), (Shape{3, 4, 4, 2}));
  // Heads 0 and 1 share K/V head 0 but have their own queries, so their weights differ.
  EXPECT_NE(weights.narrow(1, 0, 1).to_vector<double>(), weights.narrow(1, 1, 1).to_vector<double>());
  mha.observer = nullptr;
  AttentionOptions o;
  const int64_t B = 3, T = 4, D = 2;
  auto split = [&](const Tensor& x, int64_t n) { return x.reshape({B, x.size(1), n, D}).transpose(1, 2); };
  Tensor ref = scaled_dot_product_attention(split(mha.q_proj->forward(q), 4), split(mha.k_proj->forward(kv), 2),
                                            split(mha.v_proj->forward(kv), 2), o).out;
  ref = mha.out_proj->forward((ref * scale.reshape({1, 4, 1, 1})).transpose(1, 2).reshape({B, T, 8}));
  expect_close(out, ref, 1e-12, 1e-12);
}

TEST(AttentionObserver, SeesWeightsAndHeadsOfEachForward) {
  Generator gen(1), g(2);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  const Tensor q = Tensor::randn({3, 4, 8}, g).requires_grad_(), kv = Tensor::randn({3, 5, 8}, g);
  MHAOptions o;
  o.key_padding_mask = Tensor::from_vector(std::vector<bool>(15, false), {3, 5});
  o.need_weights = true;
  const MHAOutput plain = mha.forward(q, kv, kv, o);

  std::vector<AttentionCall> calls;
  mha.observer = [&](AttentionCall& c) { calls.push_back(c); };
  const MHAOutput seen = mha.forward(q, kv, kv, o);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].weights.shape(), (Shape{3, 2, 4, 5}));  // [B, H, T, S]
  EXPECT_EQ(calls[0].heads.shape(), (Shape{3, 2, 4, 4}));    // [B, H, T, D]
  EXPECT_FALSE(calls[0].weights.requires_grad());
  EXPECT_TRUE(calls[0].heads.requires_grad());
  EXPECT_EQ(calls[0].weights.to_vector<float>(), plain.weights.to_vector<float>());
  // The heads are what out_proj reads, merged: out = out_proj([B, T, H·D]).
  const Tensor merged = calls[0].heads.transpose(1, 2).reshape({3, 4, 8});
  EXPECT_EQ(mha.out_proj->forward(merged).to_vector<float>(), seen.out.to_vector<float>());
  EXPECT_EQ(seen.out.to_vector<float>(), plain.out.to_vector<float>());

  // Incremental decoding: one new query against the t keys cached so far.
  AttentionCache cache;
  MHAOptions step;
  step.is_causal = true;
  step.cache = &cache;
  calls.clear();
  for (int64_t t = 0; t < 3; ++t) mha.forward(kv.narrow(1, t, 1), kv.narrow(1, t, 1), kv.narrow(1, t, 1), step);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[2].weights.shape(), (Shape{3, 2, 1, 3}));
  EXPECT_EQ(calls[2].heads.shape(), (Shape{3, 2, 1, 4}));
}

TEST(AttentionObserver, WithoutOneTheForwardIsTheCompositionBitForBit) {
  Generator gen(3), g(4);
  MultiHeadAttention mha({.embed_dim = 12, .num_heads = 3}, gen);
  const Tensor q = Tensor::randn({2, 5, 12}, g), kv = Tensor::randn({2, 6, 12}, g);
  AttentionOptions causal;
  causal.is_causal = true;
  AttentionOptions padded;
  padded.key_padding_mask = Tensor::from_vector(std::vector<bool>{false, false, false, true, true, true, false, false, false, false, false, true},
                                                  {2, 6});
  MHAOptions causal_mha;
  causal_mha.is_causal = true;
  MHAOptions padded_mha;
  padded_mha.key_padding_mask = padded.key_padding_mask;

  const std::vector<float> self = composed_forward(mha, q, q, causal).to_vector<float>();
  const std::vector<float> cross = composed_forward(mha, q, kv, padded).to_vector<float>();
  EXPECT_EQ(mha.forward(q, q, q, causal_mha).out.to_vector<float>(), self);
  EXPECT_EQ(mha.forward(q, kv, kv, padded_mha).out.to_vector<float>(), cross);
  // An observer that only looks changes nothing; removed, nothing is left behind.
  int64_t calls = 0;
  mha.observer = [&calls](AttentionCall&) { ++calls; };
  EXPECT_EQ(mha.forward(q, kv, kv, padded_mha).out.to_vector<float>(), cross);
  mha.observer = nullptr;
  EXPECT_EQ(mha.forward(q, q, q, causal_mha).out.to_vector<float>(), self);
  EXPECT_EQ(calls, 1);
}

TEST(AttentionObserver, ScalingAHeadByZeroIsTheHeadMaskAndRemovesTheHead) {
  Generator gen(5), g(6);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  const Tensor q = Tensor::randn({2, 3, 8}, g), kv = Tensor::randn({2, 4, 8}, g);
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 0}, {2});
  mha.observer = [&](AttentionCall& c) { c.head_scale = mask; };
  const Tensor out = mha.forward(q, kv, kv).out;
  // The formula of the old head mask (before the observer), bit for bit ...
  EXPECT_EQ(out.to_vector<float>(), composed_forward(mha, q, kv, {}, mask).to_vector<float>());
  // ... and the same as a model whose out_proj never reads head 1 (columns D..E).
  mha.observer = nullptr;
  {
    NoGradGuard no_grad;
    float* w = mha.out_proj->weight.data<float>();
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 4; c < 8; ++c) w[r * 8 + c] = 0.f;
  }
  expect_close(out, mha.forward(q, kv, kv).out, 1e-6, 1e-7);
}

TEST(AttentionObserver, HeadScaleIsDifferentiable) {
  Generator gen(7), g(8);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .dtype = DType::f64}, gen);
  const Tensor x = Tensor::randn({2, 3, 8}, g, DType::f64).requires_grad_();
  const Tensor scale = Tensor::from_vector(std::vector<double>{0.5, -1.5}, {2}, DType::f64).requires_grad_();
  auto r = gradcheck([&](const std::vector<Tensor>& in) {
    mha.observer = [&](AttentionCall& c) { c.head_scale = in[1]; };
    return mha.forward(in[0], in[0], in[0]).out;
  }, {x, scale});
  EXPECT_TRUE(r.ok) << r.summary();

  // Pruning: a head scaled by 0 sends no gradient to its own q/k/v projection rows.
  const Tensor keep = Tensor::from_vector(std::vector<double>{1, 0}, {2}, DType::f64);
  mha.observer = [&](AttentionCall& c) { c.head_scale = keep; };
  mha.zero_grad();
  sum(mha.forward(x, x, x).out).backward();
  const std::vector<double> dq = mha.q_proj->weight.grad().to_vector<double>();  // [E, E], rows = output features
  double head0 = 0, head1 = 0;
  for (size_t i = 0; i < dq.size(); ++i) (i < 4 * 8 ? head0 : head1) += std::abs(dq[i]);
  EXPECT_GT(head0, 0);
  EXPECT_EQ(head1, 0);
}

TEST(AttentionObserver, BadHeadScaleNamesTheModule) {
  Generator gen(9), g(10);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  const Tensor x = Tensor::randn({1, 2, 8}, g);
  mha.observer = [](AttentionCall& c) { c.head_scale = Tensor::ones({3}); };
  expect_error<ShapeError>([&] { mha.forward(x, x, x); }, {"MultiHeadAttention", "head_scale must be [2]", "[3]"});
  mha.observer = [](AttentionCall& c) { c.head_scale = Tensor::ones({2}, DType::f64); };
  expect_error<DTypeError>([&] { mha.forward(x, x, x); }, {"MultiHeadAttention", "head_scale", "f64"});
}

TEST(AttentionObserver, EveryModuleOfATransformerByNameAndTheGuardRestores) {
  Generator gen(11);
  const TransformerConfig c{.src_vocab = 9, .tgt_vocab = 11, .d_model = 8, .heads = 2, .d_ff = 16,
                            .enc_layers = 2, .dec_layers = 2, .dropout = 0.0, .max_len = 16};
  Seq2SeqTransformer model(c, gen, nullptr);
  const std::vector<std::string> names = {"encoder.layers.0.self_attn",  "encoder.layers.1.self_attn",
                                          "decoder.layers.0.self_attn",  "decoder.layers.0.cross_attn",
                                          "decoder.layers.1.self_attn",  "decoder.layers.1.cross_attn"};
  const auto modules = attention_modules(model);
  ASSERT_EQ(modules.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(modules[i].first, names[i]);
  EXPECT_EQ(modules[3].second, (*model.decoder->layers)[0].cross_attn);

  const Tensor src = Tensor::from_vector(std::vector<int64_t>{4, 5, 6, 2, 7, 8, 2, 0}, {2, 4});
  const Tensor tgt = Tensor::from_vector(std::vector<int64_t>{1, 5, 6, 1, 9, 0}, {2, 3});
  const Tensor kpm = eq(src, Tensor::zeros({}, DType::i64));
  NoGradGuard no_grad;
  const std::vector<float> plain = model.forward(src, tgt, kpm).to_vector<float>();
  int64_t outer_calls = 0;
  modules[0].second->observer = [&outer_calls](AttentionCall&) { ++outer_calls; };
  std::vector<std::pair<std::string, Shape>> seen;
  {
    AttentionObserverGuard observe(model, [&](const std::string& name) -> AttentionObserver {
      return [&seen, name](AttentionCall& call) { seen.emplace_back(name, call.weights.shape()); };
    });
    EXPECT_EQ(model.forward(src, tgt, kpm).to_vector<float>(), plain);
  }
  ASSERT_EQ(seen.size(), names.size());  // once per module, in the order the forward runs them
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(seen[i].first, names[i]);
  EXPECT_EQ(seen[0].second, (Shape{2, 2, 4, 4}));  // encoder self [B, H, S, S]
  EXPECT_EQ(seen[2].second, (Shape{2, 2, 3, 3}));  // decoder self [B, H, T, T]
  EXPECT_EQ(seen[3].second, (Shape{2, 2, 3, 4}));  // cross [B, H, T, S]
  EXPECT_EQ(outer_calls, 0);
  // The earlier observers are back: the encoder's counter, none elsewhere.
  model.forward(src, tgt, kpm);
  EXPECT_EQ(outer_calls, 1);
  for (size_t i = 1; i < modules.size(); ++i) EXPECT_FALSE(modules[i].second->observer) << names[i];
}

TEST(AttentionObserver, DecodingThroughTheGraphCallsObserversAndTheStepRefusesThem) {
  // greedy_decode and beam_search run decode_step by default, which never calls
  // an observer, so it refuses a model that has one; use_decode_step = false
  // feeds each token through the graph with the same KV cache instead: the
  // observer sees every decoder call, a head scale of 1 changes no token, and
  // a zero head scale (a head mask) reaches the decoding.
  TransformerConfig c;
  c.src_vocab = 11;
  c.tgt_vocab = 13;
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 32;
  c.enc_layers = 1;
  c.dec_layers = 1;
  c.max_len = 16;
  Generator gen(5);
  Seq2SeqTransformer model(c, gen, nullptr);
  randomize_parameters(model, 6, 0.5);
  model.eval();
  const Tensor src = Tensor::from_vector(std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9, 10}, {2, 4});
  DecodeOptions step{.max_len = 8, .bos_id = 1, .eos_id = 2};
  DecodeOptions graph = step;
  graph.use_decode_step = false;
  const std::vector<Hypothesis> plain = greedy_decode(model, src, Tensor(), step);

  int64_t calls = 0;
  const Tensor ones = Tensor::ones({4});
  {
    AttentionObserverGuard watch(model, [&](const std::string&) -> AttentionObserver {
      return [&](AttentionCall& call) {
        ++calls;
        call.head_scale = ones;
      };
    });
    expect_error<ValueError>([&] { greedy_decode(model, src, Tensor(), step); }, {"attention observer"});
    const std::vector<Hypothesis> seen = greedy_decode(model, src, Tensor(), graph);
    ASSERT_EQ(seen.size(), plain.size());
    for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].tokens, plain[i].tokens) << "row " << i;
  }
  EXPECT_GT(calls, 2 * 3);  // the encoder's self-attention, and two decoder modules per generated token

  // Every decoder head masked out: the decoding changes (the output no longer reads the source).
  const Tensor zeros = Tensor::zeros({4});
  AttentionObserverGuard mask(model, [&](const std::string& name) -> AttentionObserver {
    if (name.find("decoder") == std::string::npos) return nullptr;
    return [&](AttentionCall& call) { call.head_scale = zeros; };
  });
  const std::vector<Hypothesis> masked = greedy_decode(model, src, Tensor(), graph);
  bool differs = false;
  for (size_t i = 0; i < masked.size(); ++i)
    differs |= masked[i].tokens != plain[i].tokens || std::abs(masked[i].log_prob - plain[i].log_prob) > 1e-6;
  EXPECT_TRUE(differs);
}
