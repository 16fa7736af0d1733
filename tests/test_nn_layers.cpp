// nn layers: values, gradchecks w.r.t. inputs and every parameter (float64),
// MultiHeadAttention masks, KV cache and causality, the Transformer.
#include <gtest/gtest.h>

#include <attograd/autograd/autograd.h>
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

// x [B, T, E] fed through mha's causal self-attention one step at a time,
// with `cache`, gives the outputs of one causal forward; returns those.
Tensor expect_cached_steps_match_full(MultiHeadAttention& mha, const Tensor& x, AttentionCache& cache) {
  mha.eval();
  NoGradGuard no_grad;
  MHAOptions full;
  full.is_causal = true;
  Tensor ref = mha.forward(x, x, x, full).out;
  std::vector<Tensor> steps;
  for (int64_t t = 0; t < x.size(1); ++t) {
    MHAOptions o;
    o.is_causal = true;
    o.cache = &cache;
    Tensor xt = x.narrow(1, t, 1);
    steps.push_back(mha.forward(xt, xt, xt, o).out);
  }
  expect_close(cat(steps, 1), ref, 1e-5, 1e-5);
  return ref;
}

// Decodes a fixed batch of 2 (source length 4, one padded) to 4 target steps
// with a KV cache, expects the logits of one full decode; returns the cache.
KVCache decode_cached_and_full(Seq2SeqTransformer& m) {
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
  return cache;
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
  NoGradGuard no_grad;
  Tensor x = Tensor::randn({2, 6, 16}, g);
  AttentionCache cache;
  const Tensor ref = expect_cached_steps_match_full(mha, x, cache);
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

// ---- grouped-query attention: G K/V heads shared by groups of H/G query heads ----

TEST(MultiHeadAttention, GroupedProjectionsAndGradcheck) {
  for (int64_t G : {1, 2, 4}) {
    SCOPED_TRACE(G);
    Generator gen(0), g(5);
    MultiHeadAttention mha({.embed_dim = 8, .num_heads = 4, .num_kv_heads = G}, gen);
    EXPECT_EQ(mha.num_kv_heads, G);
    EXPECT_EQ(mha.k_proj->weight.shape(), (Shape{G * 2, 8}));  // E -> G·D
    EXPECT_EQ(mha.v_proj->weight.shape(), (Shape{G * 2, 8}));
    EXPECT_EQ(mha.q_proj->weight.shape(), (Shape{8, 8}));
    Tensor x = randn_leaf({2, 3, 8}, g);
    MHAOptions causal;
    causal.is_causal = true;
    gradcheck_module(mha, {x}, [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0], causal).out; });
    Tensor mem = randn_leaf({2, 5, 8}, g);
    MHAOptions pad;
    pad.key_padding_mask = Tensor::from_vector(std::vector<bool>{false, false, false, true, true, false, false, false,
                                                                 false, false}, {2, 5});
    pad.need_weights = true;
    gradcheck_module(mha, {x, mem},
                     [&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[1], in[1], pad).out; });
    EXPECT_EQ(mha.forward(x, mem, mem, pad).weights.shape(), (Shape{2, 4, 3, 5}));  // per query head
  }
}

TEST(MultiHeadAttention, GroupedHeadsMustDivideHeads) {
  Generator gen(0);
  const std::string msg = error_message<ValueError>(
      [&] { MultiHeadAttention({.embed_dim = 12, .num_heads = 4, .num_kv_heads = 3}, gen); });
  for (const char* part : {"MultiHeadAttention", "num_kv_heads 3", "num_heads 4"})
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing in: " << msg;
  EXPECT_THROW(MultiHeadAttention({.embed_dim = 12, .num_heads = 4, .num_kv_heads = 0}, gen), ValueError);
}

TEST(MultiHeadAttention, GroupedKVCacheMatchesFullAndIsSizedByG) {
  for (int64_t G : {1, 2}) {
    SCOPED_TRACE(G);
    Generator gen(0), g(7);
    MultiHeadAttention mha({.embed_dim = 16, .num_heads = 4, .num_kv_heads = G}, gen);
    AttentionCache cache;
    expect_cached_steps_match_full(mha, Tensor::randn({2, 6, 16}, g), cache);
    EXPECT_EQ(cache.keys().shape(), (Shape{2, G, 6, 4}));
    EXPECT_EQ(cache.bytes_used(), 2u * 2 * G * 6 * 4 * sizeof(float));  // 2 · B · G · t · D · 4
    EXPECT_EQ(cache.bytes_allocated(), 2u * 2 * G * 16 * 4 * sizeof(float));  // capacity 16
  }
}

TEST(Transformer, GroupedCachedDecodingMatchesFullDecode) {
  Generator gen(0);
  TransformerConfig c = tiny_config();
  c.heads = 4;  // D = 2
  c.kv_heads = 1;
  c.dec_layers = 2;
  Seq2SeqTransformer m(c, gen, nullptr);
  EXPECT_EQ((*m.encoder->layers)[0].self_attn->num_kv_heads, 4);  // the encoder keeps no cache: multi-head
  EXPECT_EQ((*m.decoder->layers)[1].cross_attn->num_kv_heads, 1);
  const KVCache cache = decode_cached_and_full(m);
  // self: 2 layers x K,V [2, 1, 4, 2]; cross: 2 layers x K,V [2, 1, 4(S), 2] — a quarter of G = H's bytes
  EXPECT_EQ(cache.bytes_used(), 2u * (2 * 2 * 1 * 4 * 2) * sizeof(float) * 2);
}

TEST(Transformer, KVHeadsConfigRoundTripsAndValidates) {
  TransformerConfig c = tiny_config();
  EXPECT_EQ(c.to_json().at("kv_heads"), 2);  // written as heads when unset
  c.kv_heads = 1;
  auto j = c.to_json();
  EXPECT_EQ(TransformerConfig::from_json(j).kv_heads, std::optional<int64_t>(1));
  j.erase("kv_heads");  // a checkpoint from before grouped-query attention
  EXPECT_EQ(TransformerConfig::from_json(j).decoder_kv_heads(), 2);
  c.kv_heads = 3;
  const std::string msg = error_message<ValueError>([&] { c.validate(); });
  EXPECT_NE(msg.find("kv_heads (3) must be positive and divide heads (2)"), std::string::npos) << msg;
}

TEST(Transformer, CausalDecoderOptionDecidesWhetherLaterTargetsLeak) {
  // Changing target token 3 leaves the logits of positions 0-2 bit-identical
  // with the causal mask (the default) and changes them without it.
  const Tensor src = Tensor::from_vector(std::vector<int64_t>{3, 4, 5, 2}, {1, 4});
  const Tensor tgt = Tensor::from_vector(std::vector<int64_t>{1, 6, 7, 8, 3}, {1, 5});
  Tensor other = tgt.clone();
  other.narrow(1, 3, 1).fill_(2.0);
  for (const bool causal : {true, false}) {
    TransformerConfig c = tiny_config();
    c.causal_decoder = causal;
    Generator gen(9);
    Seq2SeqTransformer m(c, gen, nullptr);
    m.eval();
    NoGradGuard no_grad;
    const auto a = m.forward(src, tgt).narrow(1, 0, 3).to_vector<float>();
    const auto b = m.forward(src, other).narrow(1, 0, 3).to_vector<float>();
    if (causal) EXPECT_EQ(a, b);
    else EXPECT_NE(a, b);
  }
  TransformerConfig c = tiny_config();
  EXPECT_EQ(c.to_json().at("causal_decoder"), true);
  c.causal_decoder = false;
  auto j = c.to_json();
  EXPECT_FALSE(TransformerConfig::from_json(j).causal_decoder);
  j.erase("causal_decoder");  // a checkpoint from before the option
  EXPECT_TRUE(TransformerConfig::from_json(j).causal_decoder);
}

TEST(MultiHeadAttention, MeanPoolKVHeadsAveragesEachGroupsRows) {
  // heads 4, D 2, in 3: row r of head h holds 100·h + 10·r + column
  std::vector<double> w;
  for (int h = 0; h < 4; ++h)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 3; ++c) w.push_back(100 * h + 10 * r + c);
  const Tensor weight = Tensor::from_vector(w, {8, 3}, DType::f64);
  const Tensor pooled = mean_pool_kv_heads(weight, 4, 2);  // groups {0, 1}, {2, 3}
  EXPECT_EQ(pooled.shape(), (Shape{4, 3}));
  const std::vector<double> expect{50, 51, 52, 60, 61, 62, 250, 251, 252, 260, 261, 262};
  EXPECT_EQ(pooled.to_vector<double>(), expect);
  EXPECT_EQ(mean_pool_kv_heads(weight, 4, 1).to_vector<double>(), (std::vector<double>{150, 151, 152, 160, 161, 162}));
  EXPECT_EQ(mean_pool_kv_heads(weight, 4, 4).to_vector<double>(), w);  // G = H: the identity
  const Tensor bias = Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {8}, DType::f64);
  EXPECT_EQ(mean_pool_kv_heads(bias, 4, 2).to_vector<double>(), (std::vector<double>{2, 3, 6, 7}));
  EXPECT_NE(error_message<ValueError>([&] { mean_pool_kv_heads(weight, 4, 3); }).find("kv_heads 3"), std::string::npos);
}

TEST(Transformer, ToGroupedQueryPoolsTheDecoderKVProjections) {
  Generator gen(0);
  TransformerConfig c = tiny_config();
  c.heads = 4;
  Seq2SeqTransformer mha(c, gen, nullptr);
  const TensorMap state = mha.state_dict();
  // G = H is the identity: same config heads, same tensors, same outputs.
  const GroupedQueryModel same = to_grouped_query(c, state, 4);
  for (const auto& [name, t] : state) EXPECT_EQ(same.state.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  // G = 2: the decoder's K/V projections pooled, everything else unchanged; the result loads into a G = 2 model.
  const GroupedQueryModel g = to_grouped_query(c, state, 2);
  EXPECT_EQ(g.config.kv_heads, std::optional<int64_t>(2));
  Seq2SeqTransformer gqa(g.config, gen, nullptr);
  gqa.load_state_dict(g.state);
  for (const auto& [name, t] : state) {
    const bool pooled = name.starts_with("decoder.") && (name.find(".k_proj.") != std::string::npos ||
                                                         name.find(".v_proj.") != std::string::npos);
    if (!pooled) {
      EXPECT_EQ(g.state.at(name).to_vector<float>(), t.to_vector<float>()) << name;
      continue;
    }
    expect_close(g.state.at(name), mean_pool_kv_heads(t, 4, 2), 0, 0);
    EXPECT_EQ(g.state.at(name).size(0), 4) << name;  // G·D = 2·2
  }
  // and from G = 2 on to G = 1 (a divisor of the current K/V heads), but not to 3
  EXPECT_EQ(to_grouped_query(g.config, g.state, 1).config.kv_heads, std::optional<int64_t>(1));
  const std::string msg = error_message<ValueError>([&] { to_grouped_query(g.config, g.state, 4); });
  EXPECT_NE(msg.find("kv_heads 4 must be positive and divide the model's K/V heads 2"), std::string::npos) << msg;
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
  const KVCache cache = decode_cached_and_full(m);
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
