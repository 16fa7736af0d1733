// The decoder-only GPT (attograd/nn/gpt.h): gradients, the KV cache, config round trips.
// Its values against PyTorch are in test_torch_fixtures.cpp.
#include <gtest/gtest.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/nn/gpt.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

GPTConfig tiny(PositionalEncoding::Kind pos, bool tie, GPTInit init) {
  GPTConfig c;
  c.vocab = 7;
  c.context = 6;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.layers = 2;
  c.positions = pos;
  c.tie_embeddings = tie;
  c.init = init;
  return c;
}

const Tensor kIds = ids({1, 4, 2, 6, 0, 3, 5, 5}, {2, 4});
const Tensor kTargets = ids({4, 2, 6, 0, 3, 5, 5, 1}, {2, 4});

}  // namespace

class GPTGradcheck : public ::testing::TestWithParam<std::tuple<PositionalEncoding::Kind, bool>> {};

TEST_P(GPTGradcheck, LossGradientOfEveryParameter) {
  const auto [pos, tie] = GetParam();
  Generator gen(3);
  GPT m(tiny(pos, tie, GPTInit::gpt2), gen);
  m.to(DType::f64);
  randomize_parameters(m, 4, 0.5);  // GPT-2's init keeps the weights small
  expect_gradcheck([&](const std::vector<Tensor>&) {
    return cross_entropy(m.forward(kIds).reshape({-1, 7}), kTargets.reshape({-1}));
  }, m.parameters());
}

INSTANTIATE_TEST_SUITE_P(Positions, GPTGradcheck,
                         ::testing::Values(std::make_tuple(PositionalEncoding::Kind::learned, true),
                                           std::make_tuple(PositionalEncoding::Kind::sinusoidal, false)));

TEST(GPT, CachedIncrementalForwardEqualsFullForward) {
  Generator gen(5);
  GPT m(tiny(PositionalEncoding::Kind::learned, true, GPTInit::pytorch), gen);
  m.to(DType::f64);
  m.eval();
  NoGradGuard no_grad;
  const Tensor seq = ids({1, 4, 2, 6, 0, 3, 5, 5, 2, 1, 0, 6}, {2, 6});
  const Tensor full = m.forward(seq);  // [2, 6, 7]
  KVCache cache = m.make_cache();
  // A prompt of 3 tokens at once, then one token per step.
  expect_close(m.forward(seq.narrow(1, 0, 3), &cache), full.narrow(1, 0, 3), 1e-10, 1e-12);
  for (int64_t t = 3; t < 6; ++t)
    expect_close(m.forward(seq.narrow(1, t, 1), &cache), full.narrow(1, t, 1), 1e-10, 1e-12);
  EXPECT_EQ(cache.length(), 6);
  expect_error<ShapeError>([&] { m.forward(seq.narrow(1, 0, 1), &cache); }, {"exceed the context of 6"});
}

TEST(GPT, TiedHeadSharesTheEmbeddingAndGPT2InitScalesResidualProjections) {
  Generator gen(6);
  GPTConfig c = tiny(PositionalEncoding::Kind::learned, true, GPTInit::gpt2);
  c.d_model = 64;
  c.d_ff = 256;
  c.layers = 8;
  GPT m(c, gen);
  EXPECT_EQ(m.lm_head->weight.id(), m.tok_embed->weight.id());
  auto stddev = [](const Tensor& t) {
    double s = 0;
    for (double v : t.to_vector<double>()) s += v * v;
    return std::sqrt(s / static_cast<double>(t.numel()));
  };
  EXPECT_NEAR(stddev(m.blocks->operator[](0).mlp->linear1->weight), 0.02, 0.002);
  EXPECT_NEAR(stddev(m.blocks->operator[](0).mlp->linear2->weight), 0.02 / 4, 0.0005);
  EXPECT_NEAR(stddev(m.blocks->operator[](0).attn->out_proj->weight), 0.02 / 4, 0.0008);
  GPT untied(tiny(PositionalEncoding::Kind::learned, false, GPTInit::pytorch), gen);
  EXPECT_NE(untied.lm_head->weight.id(), untied.tok_embed->weight.id());
}

TEST(GPT, ConfigJsonRoundTripAndValidation) {
  GPTConfig c = tiny(PositionalEncoding::Kind::sinusoidal, false, GPTInit::gpt2);
  const GPTConfig back = GPTConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  c.heads = 3;
  expect_error<ValueError>([&] { c.validate(); }, {"heads (3) must divide d_model (8)"});
  nlohmann::json j = back.to_json();
  j["positions"] = "rotary";
  expect_error<ValueError>([&] { GPTConfig::from_json(j); }, {"unknown positions 'rotary'"});
}

TEST(GPT, BadIdsAreErrors) {
  Generator gen(8);
  GPT m(tiny(PositionalEncoding::Kind::learned, true, GPTInit::pytorch), gen);
  expect_error<ShapeError>([&] { m.forward(ids({1, 2, 3}, {3})); }, {"expected ids [B, T], got [3]"});
  expect_error<DTypeError>([&] { m.forward(f64({1, 2}, {1, 2})); }, {"expected i64 ids"});
  expect_error<ShapeError>([&] { m.forward(ids(std::vector<int64_t>(7, 1), {1, 7})); }, {"exceed the context of 6"});
}
