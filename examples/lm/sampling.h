// Sampling text from a GPT, one token at a time through the KV cache.
//
// Shape legend: V vocab, T context.
// The next token is drawn from softmax(logits / temperature) restricted to the
// top_k most likely tokens (0: all) and then to the smallest set of most
// likely tokens whose probability reaches top_p (1: all), renormalised
// (Holtzman et al. 2020). Temperature 0 takes the argmax.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <attograd/autograd/generator.h>
#include <attograd/nn/gpt.h>

namespace attograd::app {

struct SampleOptions {
  double temperature = 0.8;
  int64_t top_k = 0;
  double top_p = 1.0;
  int64_t max_new = 200;  // new tokens
};

// One token id from logits [V]. ValueError for a bad option.
int32_t sample_token(std::span<const float> logits, const SampleOptions& opt, Generator& gen);

// Continues prompt (at most context − 1 tokens; ValueError otherwise) by
// opt.max_new tokens, calling on_token(id) as each one is drawn. When the
// cache is full, the last half context is fed again into a fresh cache, so
// generation goes on past the context. A model without the causal mask
// (GPTConfig::causal false) cannot use a cache: each token then runs the
// graph over the last context tokens.
std::vector<int32_t> generate(GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt, Generator& gen,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace attograd::app
