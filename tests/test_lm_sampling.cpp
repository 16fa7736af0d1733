// Sampling from a GPT (examples/lm/sampling.h): temperature, top-k, top-p,
// seeds, and generation past the context through the KV cache.
#include <gtest/gtest.h>

#include <map>

#include <attograd/autograd/error.h>
#include "examples/lm/sampling.h"

#include "test_util.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::testing;

namespace {

std::map<int32_t, int> histogram(const std::vector<float>& logits, const SampleOptions& o, int n = 2000) {
  Generator gen(1);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[sample_token(logits, o, gen)];
  return h;
}

}  // namespace

TEST(SampleToken, TemperatureZeroIsArgmaxAndTopKTopPRestrict) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.9f, -1.0f, 1.0f};
  Generator gen(3);
  EXPECT_EQ(sample_token(logits, {.temperature = 0}, gen), 1);
  EXPECT_EQ(histogram(logits, {.temperature = 1, .top_k = 1}).size(), 1u);
  auto top2 = histogram(logits, {.temperature = 1, .top_k = 2});
  EXPECT_EQ(top2.size(), 2u);
  EXPECT_TRUE(top2.count(1) && top2.count(2));
  // p ∝ e^2, e^1.9, e^1, e^0, e^-1: the top two hold 0.39 + 0.35 = 0.74 of the mass.
  auto nucleus = histogram(logits, {.temperature = 1, .top_p = 0.7});
  EXPECT_EQ(nucleus.size(), 2u);
  EXPECT_EQ(histogram(logits, {.temperature = 1}).size(), 5u);
  // Frequencies follow softmax: token 1 about e^0.1 ≈ 1.105 times as often as token 2.
  auto all = histogram(logits, {.temperature = 1}, 20000);
  EXPECT_NEAR(static_cast<double>(all[1]) / all[2], std::exp(0.1), 0.1);
}

TEST(SampleToken, BadOptionsAreErrors) {
  const std::vector<float> logits = {0.0f, 1.0f};
  Generator gen(3);
  expect_error<ValueError>([&] { sample_token(logits, {.temperature = -1}, gen); }, {"--temperature"});
  expect_error<ValueError>([&] { sample_token(logits, {.top_p = 0}, gen); }, {"--top-p"});
  expect_error<ValueError>([&] { sample_token(logits, {.top_k = -2}, gen); }, {"--top-k"});
}

TEST(Generate, SeededAndGoesPastTheContext) {
  GPTConfig c;
  c.vocab = 9;
  c.context = 8;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 16;
  c.layers = 1;
  Generator init(2);
  GPT m(c, init);
  Generator a(5), b(5), other(6);
  std::vector<int32_t> streamed;
  const auto x = generate(m, {1, 2, 3}, {.temperature = 1, .max_new = 30}, a, [&](int32_t id) { streamed.push_back(id); });
  EXPECT_EQ(x.size(), 30u);
  EXPECT_EQ(streamed, x);
  EXPECT_EQ(generate(m, {1, 2, 3}, {.temperature = 1, .max_new = 30}, b), x);
  EXPECT_NE(generate(m, {1, 2, 3}, {.temperature = 1, .max_new = 30}, other), x);
  // Greedy through the cache equals greedy by full forwards while inside the context.
  const auto greedy = generate(m, {4}, {.temperature = 0, .max_new = 7}, a);
  std::vector<int64_t> seq = {4};
  for (int i = 0; i < 7; ++i) {
    const Tensor logits = m.forward(Tensor::from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    const auto last = logits.narrow(1, logits.size(1) - 1, 1).reshape({-1}).to_vector<float>();
    seq.push_back(std::max_element(last.begin(), last.end()) - last.begin());
  }
  EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.end()), std::vector<int64_t>(seq.begin() + 1, seq.end()));
  expect_error<ValueError>([&] { generate(m, std::vector<int32_t>(8, 1), {}, a); }, {"at most 7"});
  expect_error<ValueError>([&] { generate(m, {}, {}, a); }, {"the prompt is empty"});
}
