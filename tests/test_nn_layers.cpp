// nn layers: values, gradchecks w.r.t. inputs and every parameter (float64),
// MultiHeadAttention masks, KV cache and causality, the Transformer.
#include <gtest/gtest.h>

#include <attograd/autograd/ops.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/nn/transformer.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// gradcheck a module: inputs first, then every parameter.
template <class F>
void gradcheck_module(Module& m, const std::vector<Tensor>& inputs, F&& fn) {
  m.to(DType::f64);
  std::vector<Tensor> all = inputs;
  const size_t n_in = inputs.size();
  for (auto& p : m.parameters()) all.push_back(p);
  auto r = gradcheck([&](const std::vector<Tensor>& in) {
    return fn(std::vector<Tensor>(in.begin(), in.begin() + static_cast<long>(n_in)));
  }, all);
  EXPECT_TRUE(r.ok) << r.summary();
}

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.src_vocab = 7; c.tgt_vocab = 9; c.d_model = 8; c.heads = 2; c.d_ff = 12;
  c.enc_layers = 1; c.dec_layers = 1; c.dropout = 0.0; c.max_len = 16;
  return c;
}

}  // namespace

TEST(Linear, ValuesAndGradcheck) {
  Generator gen(0);
  Linear lin(3, 2, gen);
  lin.to(DType::f64);
  lin.weight.copy_(Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64));
  lin.bias.copy_(Tensor::from_list({0.5, -0.5}, {2}, DType::f64));
  Tensor y = lin.forward(Tensor::from_list({1, 0, -1}, {1, 3}, DType::f64));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1 - 3 + 0.5, 4 - 6 - 0.5}));
  Generator g(1);
  gradcheck_module(lin, {randn_leaf({2, 4, 3}, g)}, [&](const std::vector<Tensor>& in) { return lin.forward(in[0]); });
  Linear nobias(3, 2, gen, false);
  EXPECT_FALSE(nobias.bias.defined());
  gradcheck_module(nobias, {randn_leaf({5, 3}, g)}, [&](const std::vector<Tensor>& in) { return nobias.forward(in[0]); });
}

TEST(Embedding, PaddingRowGetsNoGradient) {
  Generator gen(0);
  Embedding emb(5, 3, gen, 0);
  EXPECT_EQ(emb.weight.narrow(0, 0, 1).to_vector<float>(), std::vector<float>(3, 0.0f));
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 2, 2, 0, 4}, {5});
  sum(emb.forward(ids)).backward();
  auto g = emb.weight.grad().to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(g[0 * 3 + j], 0.0f);  // padding row
    EXPECT_EQ(g[2 * 3 + j], 2.0f);  // used twice
    EXPECT_EQ(g[1 * 3 + j], 0.0f);  // unused
  }
  emb.to(DType::f64);
  auto r = gradcheck([&](const std::vector<Tensor>&) { return emb.forward(ids) * emb.forward(ids); }, {emb.weight});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(PositionalEncoding, SinusoidalValues) {
  Generator gen(0);
  PositionalEncoding pe(10, 4, PositionalEncoding::Kind::sinusoidal, gen);
  Tensor z = Tensor::zeros({1, 3, 4});
  auto v = pe.forward(z, 2).to_vector<float>();
  // position 2, dims (sin, cos) at frequencies 1 and 1/100
  EXPECT_NEAR(v[0], std::sin(2.0), 1e-6);
  EXPECT_NEAR(v[1], std::cos(2.0), 1e-6);
  EXPECT_NEAR(v[2], std::sin(2.0 / 100.0), 1e-6);
  EXPECT_NEAR(v[3], std::cos(2.0 / 100.0), 1e-6);
  EXPECT_TRUE(pe.named_parameters().empty());  // a fixed buffer
  EXPECT_TRUE(pe.state_dict().empty());         // not persistent
  EXPECT_NE(error_message<ShapeError>([&] { pe.forward(Tensor::zeros({1, 9, 4}), 2); }).find("max_len 10"),
            std::string::npos);
  PositionalEncoding learned(10, 4, PositionalEncoding::Kind::learned, gen);
  EXPECT_EQ(learned.named_parameters().size(), 1u);
}

TEST(LayerNormModule, Gradcheck) {
  LayerNorm ln(Shape{4});
  Generator g(2);
  ln.to(DType::f64);
  ln.weight.copy_(Tensor::randn({4}, g, DType::f64));
  ln.bias.copy_(Tensor::randn({4}, g, DType::f64));
  gradcheck_module(ln, {randn_leaf({2, 3, 4}, g)}, [&](const std::vector<Tensor>& in) { return ln.forward(in[0]); });
}

TEST(MultiHeadAttention, GradcheckEveryMaskKind) {
  Generator gen(0), g(3);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  Tensor x = randn_leaf({2, 3, 8}, g);
  gradcheck_module(mha, {x}, [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).out; });
  MHAOptions causal;
  causal.is_causal = true;
  gradcheck_module(mha, {x}, [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], causal).out; });
  MHAOptions pad;
  pad.key_padding_mask = Tensor::from_vector(std::vector<bool>{false, false, true, false, true, true}, {2, 3});
  gradcheck_module(mha, {x}, [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], pad).out; });
}

TEST(MultiHeadAttention, CrossAttentionWithOtherWidths) {
  Generator gen(0), g(4);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 4, .kdim = 5, .vdim = 6}, gen);
  Tensor q = randn_leaf({2, 3, 8}, g), k = randn_leaf({2, 5, 5}, g), v = randn_leaf({2, 5, 6}, g);
  gradcheck_module(mha, {q, k, v}, [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[2]).out; });
  MHAOptions o;
  o.need_weights = true;
  mha.to(DType::f32);
  auto r = mha.forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o);
  EXPECT_EQ(r.out.shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 3, 5}));
  o.average_weights = true;
  EXPECT_EQ(mha.forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o).weights.shape(), (Shape{2, 3, 5}));
}

TEST(MultiHeadAttention, FullyMaskedRowGivesZerosNotNaN) {
  Generator gen(0), g(5);
  MultiHeadAttention mha({.embed_dim = 4, .num_heads = 2}, gen);
  Tensor x = Tensor::randn({1, 3, 4}, g).requires_grad_();
  MHAOptions o;
  o.key_padding_mask = Tensor::from_vector(std::vector<bool>{true, true, true}, {1, 3});
  Tensor y = mha.forward(x, x, x, o).out;
  for (float v : y.to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
  sum(y).backward();
  for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(MultiHeadAttention, CausalNeverSeesTheFuture) {
  Generator gen(0), g(6);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  MHAOptions o;
  o.is_causal = true;
  o.need_weights = true;
  Tensor x = Tensor::randn({1, 5, 8}, g);
  auto a = mha.forward(x, x, x, o);
  Tensor x2 = x.clone();
  x2.narrow(1, 3, 2).copy_(Tensor::randn({1, 2, 8}, g));  // change tokens 3 and 4
  auto b = mha.forward(x2, x2, x2, o);
  auto va = a.out.to_vector<float>(), vb = b.out.to_vector<float>();
  for (int t = 0; t < 3; ++t)
    for (int e = 0; e < 8; ++e) EXPECT_EQ(va[t * 8 + e], vb[t * 8 + e]) << "position " << t;
  auto w = a.weights.to_vector<float>();  // [1, 2, 5, 5]
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 5; ++t)
      for (int s = t + 1; s < 5; ++s) EXPECT_EQ(w[(h * 5 + t) * 5 + s], 0.0f);
}

TEST(MultiHeadAttention, CausalBackwardSendsNoGradientToTheFuture) {
  // d out[t] / d x[s] is exactly 0 for every s > t: the masked scores were -inf,
  // their probabilities exactly 0, so dS = P ⊙ (dP - rowsum) is 0 there too.
  Generator gen(0), g(8);
  MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2}, gen);
  MHAOptions o;
  o.is_causal = true;
  for (int64_t t = 0; t < 5; ++t) {
    Tensor x = Tensor::randn({1, 5, 8}, g).requires_grad_();
    sum(mha.forward(x, x, x, o).out.narrow(1, t, 1)).backward();
    const auto dx = x.grad().to_vector<float>();  // [1, 5, 8]
    double past = 0;
    for (int64_t s = 0; s < 5; ++s)
      for (int64_t e = 0; e < 8; ++e) {
        const float v = dx[static_cast<size_t>(s * 8 + e)];
        if (s > t) EXPECT_EQ(v, 0.0f) << "query " << t << " sent gradient to future position " << s;
        else past += std::abs(v);
      }
    EXPECT_GT(past, 0) << "query " << t << " must depend on its past";
  }
}

TEST(MultiHeadAttention, KVCacheMatchesFullCausalForward) {
  Generator gen(0), g(7);
  MultiHeadAttention mha({.embed_dim = 16, .num_heads = 4}, gen);
  mha.eval();
  NoGradGuard no_grad;
  Tensor x = Tensor::randn({2, 6, 16}, g);
  MHAOptions full;
  full.is_causal = true;
  Tensor ref = mha.forward(x, x, x, full).out;
  AttentionCache cache;
  std::vector<Tensor> steps;
  for (int t = 0; t < 6; ++t) {
    MHAOptions o;
    o.is_causal = true;
    o.cache = &cache;
    Tensor xt = x.narrow(1, t, 1);
    steps.push_back(mha.forward(xt, xt, xt, o).out);
  }
  expect_close(cat(steps, 1), ref, 1e-5, 1e-5);
  EXPECT_EQ(cache.length, 6);
  EXPECT_EQ(cache.bytes_used(), 2u * 2 * 4 * 6 * 4 * sizeof(float));
  EXPECT_GE(cache.bytes_allocated(), cache.bytes_used());
  // Two steps at once (with the causal mask inside the block) give the same.
  cache.reset();
  MHAOptions o;
  o.is_causal = true;
  o.cache = &cache;
  Tensor first = mha.forward(x.narrow(1, 0, 4), x.narrow(1, 0, 4), x.narrow(1, 0, 4), o).out;
  Tensor rest = mha.forward(x.narrow(1, 4, 2), x.narrow(1, 4, 2), x.narrow(1, 4, 2), o).out;
  expect_close(cat({first, rest}, 1), ref, 1e-5, 1e-5);
}

TEST(Transformer, EncoderDecoderLayersGradcheck) {
  Generator gen(0), g(8);
  for (bool pre : {true, false}) {
    TransformerConfig c = tiny_config();
    c.pre_ln = pre;
    TransformerEncoderLayer enc(c, gen, nullptr);
    Tensor x = randn_leaf({2, 3, 8}, g);
    gradcheck_module(enc, {x}, [&](const std::vector<Tensor>& in) { return enc.forward(in[0], Tensor()); });
    TransformerDecoderLayer dec(c, gen, nullptr);
    Tensor y = randn_leaf({2, 2, 8}, g), mem = randn_leaf({2, 3, 8}, g);
    Tensor kpm = Tensor::from_vector(std::vector<bool>{false, false, true, false, false, false}, {2, 3});
    gradcheck_module(dec, {y, mem}, [&](const std::vector<Tensor>& in) {
      return dec.forward(in[0], {.memory = in[1], .memory_key_padding_mask = kpm});
    });
  }
}

TEST(Transformer, Seq2SeqGradcheckThroughLoss) {
  Generator gen(0);
  TransformerConfig c = tiny_config();
  Seq2SeqTransformer m(c, gen, nullptr);
  m.to(DType::f64);
  Tensor src = Tensor::from_vector(std::vector<int64_t>{4, 5, 6, 2, 4, 2, 0, 0}, {2, 4});
  Tensor tgt_in = Tensor::from_vector(std::vector<int64_t>{1, 7, 8, 1, 5, 0}, {2, 3});
  Tensor tgt_out = Tensor::from_vector(std::vector<int64_t>{7, 8, 2, 5, 2, 0}, {2, 3});
  Tensor src_kpm = eq(src, Tensor::zeros({}, DType::i64));
  auto params = m.parameters();
  auto r = gradcheck([&](const std::vector<Tensor>&) {
    Tensor logits = m.forward(src, tgt_in, src_kpm);
    CrossEntropyOptions o;
    o.ignore_index = 0;
    return cross_entropy(logits.reshape({-1, c.tgt_vocab}), tgt_out.reshape({-1}), o);
  }, params);
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(Transformer, CachedDecodingMatchesFullDecode) {
  Generator gen(0);
  TransformerConfig c = tiny_config();
  c.dec_layers = 2;
  Seq2SeqTransformer m(c, gen, nullptr);
  m.eval();
  NoGradGuard no_grad;
  Tensor src = Tensor::from_vector(std::vector<int64_t>{4, 5, 6, 2, 4, 2, 0, 0}, {2, 4});
  Tensor kpm = eq(src, Tensor::zeros({}, DType::i64));
  Tensor tgt = Tensor::from_vector(std::vector<int64_t>{1, 7, 8, 3, 1, 5, 6, 4}, {2, 4});
  Tensor mem = m.encode(src, kpm);
  Tensor full = m.decode(tgt, mem, kpm);
  KVCache cache = m.make_cache();
  std::vector<Tensor> steps;
  for (int t = 0; t < 4; ++t) steps.push_back(m.decode(tgt.narrow(1, t, 1), mem, kpm, Tensor(), &cache));
  expect_close(cat(steps, 1), full, 1e-5, 1e-5);
  EXPECT_EQ(cache.length(), 4);
  // self: 2 layers x K,V [2, 2, 4, 4]; cross: 2 layers x K,V [2, 2, 4(S), 4]
  EXPECT_EQ(cache.bytes_used(), 2u * (2 * 2 * 2 * 4 * 4) * sizeof(float) * 2);
}

TEST(Transformer, ConfigValidationNamesTheField) {
  TransformerConfig c = tiny_config();
  c.heads = 3;
  EXPECT_NE(error_message<ValueError>([&] { c.validate(); }).find("heads (3) must divide d_model (8)"), std::string::npos);
  c = tiny_config();
  c.d_ff = -1;
  EXPECT_NE(error_message<ValueError>([&] { c.validate(); }).find("d_ff"), std::string::npos);
  auto j = tiny_config().to_json();
  EXPECT_EQ(TransformerConfig::from_json(j).to_json(), j);
}
