// The GPT's two attention options (attograd/nn/gpt.h): grouped-query attention
// (GPTConfig::kv_heads, the KV cache then holding G heads) and the causal
// mask's switch (GPTConfig::causal), with old checkpoints loading as causal
// multi-head models and the sampler following both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/nn/gpt.h>
#include <attograd/optim/adam.h>

#include "examples/common/checkpoint_model.h"
#include "examples/lm/sampling.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// H = 4 heads of D = 4 over E = 16; kv_heads and causal as given.
GPTConfig small(std::optional<int64_t> kv_heads, bool causal = true) {
  GPTConfig c;
  c.vocab = 9;
  c.context = 10;
  c.d_model = 16;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.d_ff = 24;
  c.layers = 2;
  c.causal = causal;
  return c;
}

const Tensor kSeq = ids({1, 4, 2, 6, 0, 3, 5, 8, 2, 1, 0, 6, 7, 7, 3, 2, 8, 1, 4, 4, 0}, {3, 7});

// Logits [B, T, V] of the graph forward, in eval mode without grad.
Tensor logits_of(GPT& m, const Tensor& seq) {
  m.eval();
  NoGradGuard no_grad;
  return m.forward(seq);
}

}  // namespace

TEST(GPTGroupedQuery, KvHeadsEqualToHeadsIsTheDefaultModelBitForBit) {
  Generator g1(11), g2(11);
  GPT unset(small(std::nullopt), g1);
  GPT explicit_h(small(4), g2);
  EXPECT_EQ(vals(logits_of(explicit_h, kSeq)), vals(logits_of(unset, kSeq)));
  EXPECT_EQ(explicit_h.num_parameters(), unset.num_parameters());
}

TEST(GPTGroupedQuery, ProjectionsAndParameterCountFollowG) {
  for (int64_t g : {1, 2, 4}) {
    Generator gen(3);
    GPT m(small(g), gen);
    const auto& attn = *(*m.blocks)[0].attn;
    EXPECT_EQ(attn.num_kv_heads, g);
    EXPECT_EQ(attn.k_proj->weight.shape(), (Shape{g * 4, 16}));  // G·D rows
    EXPECT_EQ(attn.v_proj->weight.shape(), (Shape{g * 4, 16}));
    EXPECT_EQ(m.config.parameter_count(), m.num_parameters()) << "G = " << g;
  }
}

TEST(GPTGroupedQuery, DecodeStepEqualsTheGraphAndTheCacheHoldsGHeads) {
  const int64_t B = 3, T = 7, D = 4;
  for (int64_t g : {1, 2}) {
    Generator gen(6);
    GPT m(small(g), gen);
    randomize_parameters(m, 7, 0.3);  // larger than the init, so every head matters to the logits
    const Tensor full = logits_of(m, kSeq);  // [3, 7, 9]
    m.eval();
    NoGradGuard no_grad;
    // A prompt of 2 through the graph, then one token per decode step; and every token by decode steps.
    KVCache prompted = m.make_cache(), stepped = m.make_cache();
    expect_close(m.forward(kSeq.narrow(1, 0, 2), &prompted), full.narrow(1, 0, 2), 1e-5, 1e-5);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<int64_t> step = kSeq.narrow(1, t, 1).to_vector<int64_t>();
      const Tensor want = full.narrow(1, t, 1).reshape({B, 9});
      expect_close(m.decode_step(step, stepped), want, 1e-5, 1e-5);
      if (t >= 2) expect_close(m.decode_step(step, prompted), want, 1e-5, 1e-5);
    }
    for (const KVCache* c : {&prompted, &stepped})
      for (const AttentionCache& layer : c->self_attn) {
        EXPECT_EQ(layer.keys().shape(), (Shape{B, g, T, D}));
        // K and V: G·D floats each per position and row, H/G times less than multi-head attention.
        EXPECT_EQ(layer.bytes_used(), static_cast<size_t>(2 * B * g * D * T) * sizeof(float)) << "G = " << g;
      }
  }
}

TEST(GPTGroupedQuery, GradcheckThroughTheLossWithOneKvHead) {
  GPTConfig c;
  c.vocab = 7;
  c.context = 6;
  c.d_model = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.d_ff = 12;
  c.layers = 2;
  Generator gen(3);
  GPT m(c, gen);
  m.to(DType::f64);
  randomize_parameters(m, 4, 0.5);
  ASSERT_EQ((*m.blocks)[0].attn->k_proj->weight.size(0), 4);  // one K/V head of D = 4
  const Tensor in = ids({1, 4, 2, 6, 0, 3, 5, 5}, {2, 4}), target = ids({4, 2, 6, 0, 3, 5, 5, 1}, {2, 4});
  expect_gradcheck([&](const std::vector<Tensor>&) {
    return cross_entropy(m.forward(in).reshape({-1, 7}), target.reshape({-1}));
  }, m.parameters());
}

TEST(GPTCausalSwitch, WithoutTheMaskALaterTokenChangesEarlierPositions) {
  std::vector<int64_t> tokens = kSeq.to_vector<int64_t>();
  for (size_t b = 0; b < 3; ++b) tokens[b * 7 + 5] = 8;  // token 5 of every row (none is 8)
  const Tensor edited = ids(tokens, {3, 7});
  for (bool causal : {true, false}) {
    Generator gen(9);
    GPT m(small(2, causal), gen);
    randomize_parameters(m, 10, 0.3);
    const Tensor a = logits_of(m, kSeq), b = logits_of(m, edited);
    const auto before_a = vals(a.narrow(1, 0, 5)), before_b = vals(b.narrow(1, 0, 5));
    if (causal) {
      EXPECT_EQ(before_a, before_b);  // positions 0..4 never see token 5
    } else {
      double worst = 0;
      for (size_t i = 0; i < before_a.size(); ++i) worst = std::max(worst, std::abs(before_a[i] - before_b[i]));
      EXPECT_GT(worst, 1e-3);
    }
  }
}

TEST(GPTCausalSwitch, NextTokenLossCollapsesWithoutTheMask) {
  // Uniform random tokens: a causal model cannot beat ln V, a model without
  // the mask reads each target at the next position (the control's point).
  // The last position's target lies outside the window, so the loss is over
  // the first T - 1 positions.
  const int64_t V = 6, T = 8, steps = 150;
  std::vector<double> final_loss;
  for (bool causal : {true, false}) {
    GPTConfig c = small(2, causal);
    c.vocab = V;
    c.context = T;
    Generator gen(1), data(2);
    GPT m(c, gen);
    optim::AdamOptions o;
    o.lr = 1e-2;
    optim::Adam opt(m.parameters(), o);
    double loss = 0;
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int64_t> tok(static_cast<size_t>(8 * (T + 1)));
      for (auto& t : tok) t = static_cast<int64_t>(data.next_u64() % V);
      const Tensor all = Tensor::from_vector(tok, {8, T + 1});
      const Tensor logits = m.forward(all.narrow(1, 0, T)).narrow(1, 0, T - 1);  // [8, T - 1, V]
      const Tensor l = cross_entropy(logits.contiguous().reshape({-1, V}),
                                     all.narrow(1, 1, T - 1).contiguous().reshape({-1}));
      l.backward();
      opt.step();
      opt.zero_grad();
      loss = l.item();
    }
    final_loss.push_back(loss);
  }
  EXPECT_GT(final_loss[0], 0.8 * std::log(6.0)) << "causal";
  EXPECT_LT(final_loss[1], 0.5) << "no causal mask";  // 0.22 measured, and falling
}

TEST(GPTCausalSwitch, TheCacheRefusesAModelWithoutTheMaskAndSamplingRunsTheGraph) {
  Generator gen(4);
  GPT m(small(std::nullopt, false), gen);
  m.eval();
  NoGradGuard no_grad;
  KVCache cache = m.make_cache();
  const std::vector<int64_t> row{1, 2, 3};
  expect_error<ValueError>([&] { m.decode_step(row, cache); },
                           {"GPT::decode_step", "no causal mask", "config.causal = false", "hint"});
  expect_error<ValueError>([&] { m.forward(kSeq.narrow(1, 0, 2), &cache); }, {"GPT", "no causal mask"});
  // generate's greedy tokens are those of whole-window forwards.
  Generator s(1);
  const auto greedy = app::generate(m, {4, 1}, {.temperature = 0, .max_new = 12}, s);
  std::vector<int64_t> seq = {4, 1};
  for (int i = 0; i < 12; ++i) {
    const auto n = std::min<size_t>(seq.size(), 10);
    const std::vector<int64_t> window(seq.end() - static_cast<std::ptrdiff_t>(n), seq.end());
    const Tensor logits = m.forward(Tensor::from_vector(window, {1, static_cast<int64_t>(n)}));
    const auto last = logits.narrow(1, logits.size(1) - 1, 1).reshape({-1}).to_vector<float>();
    seq.push_back(std::max_element(last.begin(), last.end()) - last.begin());
  }
  EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.end()), std::vector<int64_t>(seq.begin() + 2, seq.end()));
}

TEST(GPTGroupedQuery, GreedySamplingThroughTheGHeadCacheEqualsTheGraph) {
  Generator gen(8);
  GPT m(small(1), gen);
  randomize_parameters(m, 3, 0.3);
  Generator s(1);
  const auto greedy = app::generate(m, {4}, {.temperature = 0, .max_new = 8}, s);
  std::vector<int64_t> seq = {4};
  NoGradGuard no_grad;
  for (int i = 0; i < 8; ++i) {
    const Tensor logits = m.forward(Tensor::from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    const auto last = logits.narrow(1, logits.size(1) - 1, 1).reshape({-1}).to_vector<float>();
    seq.push_back(std::max_element(last.begin(), last.end()) - last.begin());
  }
  EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.end()), std::vector<int64_t>(seq.begin() + 1, seq.end()));
}

TEST(GPTConfigKeys, ACheckpointWithoutTheNewKeysLoadsAsCausalMultiHead) {
  Generator gen(3);
  GPT model(small(std::nullopt), gen);
  app::Checkpoint c;
  c.model_path = "ckpt/step-00000020.model.safetensors";
  c.meta.config = model.config.to_json();
  ASSERT_TRUE(c.meta.config.contains("kv_heads") && c.meta.config.contains("causal"));
  c.meta.config.erase("kv_heads");
  c.meta.config.erase("causal");
  c.model = model.state_dict();
  const auto loaded = app::gpt_from_checkpoint(c);
  EXPECT_EQ(loaded->config.kv_head_count(), 4);
  EXPECT_TRUE(loaded->config.causal);
  EXPECT_EQ(vals(logits_of(*loaded, kSeq)), vals(logits_of(model, kSeq)));
}

TEST(GPTConfigKeys, AGroupedNonCausalCheckpointRoundTrips) {
  Generator gen(3);
  GPT model(small(2, false), gen);
  app::Checkpoint c;
  c.model_path = "ckpt/step-00000020.model.safetensors";
  c.meta.config = model.config.to_json();
  c.model = model.state_dict();
  const auto loaded = app::gpt_from_checkpoint(c);
  EXPECT_EQ(loaded->config.kv_head_count(), 2);
  EXPECT_FALSE(loaded->config.causal);
  EXPECT_EQ(vals(logits_of(*loaded, kSeq)), vals(logits_of(model, kSeq)));
  // The same weights under a config that claims multi-head K/V projections are refused.
  c.meta.config["kv_heads"] = 4;
  expect_error<IOError>([&] { app::gpt_from_checkpoint(c); }, {"describes", "weights"});
}

TEST(GPTConfigKeys, KvHeadsMustBePositiveAndDivideHeads) {
  GPTConfig c = small(3);
  expect_error<ValueError>([&] { c.validate(); }, {"GPTConfig", "kv_heads (3)", "divide heads (4)", "hint"});
  c.kv_heads = 0;
  expect_error<ValueError>([&] { c.validate(); }, {"kv_heads (0)"});
  nlohmann::json j = small(std::nullopt).to_json();
  j["kv_heads"] = 3;
  expect_error<ValueError>([&] { GPTConfig::from_json(j); }, {"kv_heads (3)", "heads (4)"});
  j["kv_heads"] = "2";
  expect_error<ValueError>([&] { GPTConfig::from_json(j); }, {"kv_heads", "expected an integer"});
  j["kv_heads"] = 2;
  j["causal"] = "no";
  expect_error<ValueError>([&] { GPTConfig::from_json(j); }, {"GPTConfig", "bad config JSON"});
  Generator gen(1);
  expect_error<ValueError>([&] { GPT bad(small(-1), gen); }, {"kv_heads (-1)"});
}
