// Sizes that cannot overflow: checked element and byte counts, the allocator
// under a request it cannot serve, and model configs checked against limits,
// with parameter counts from the config alone equal to the built models'.
// The probe's B1 (d_ff = 2^62 wrapped the byte count to 0 and the
// initializer wrote out of bounds) and B5 (an allocation failure inside a
// destructor ended in std::terminate) are the regression cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <new>

#include <attograd/autograd/tensor.h>
#include <attograd/nn/config_sizes.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

namespace {

constexpr int64_t k2pow62 = int64_t{1} << 62;

TEST(CheckedSizes, ProductsThatOverflowAreErrorsNotWrappedValues) {
  EXPECT_EQ(try_numel({3, 4, 5}), 60);
  EXPECT_EQ(try_numel({}), 1);
  EXPECT_EQ(try_numel({k2pow62, k2pow62, 0}), 0);  // holds nothing, whatever the other sizes
  EXPECT_FALSE(try_numel({k2pow62, 4}));
  EXPECT_EQ(try_nbytes({k2pow62 / 4}, DType::f32), k2pow62);
  EXPECT_FALSE(try_nbytes({k2pow62}, DType::f32));  // 2^64 bytes: wrapped to 0 before
  EXPECT_FALSE(try_nbytes({int64_t{1} << 61}, DType::f64));
  expect_error<ShapeError>([] { checked_mul(k2pow62, 2, "op", "the thing"); }, {"op", "the thing overflows int64"});
  expect_error<ShapeError>([] { checked_add(std::numeric_limits<int64_t>::max(), 1, "op", "a sum"); },
                           {"a sum overflows int64"});
}

TEST(CheckedSizes, TensorsWhoseBytesOverflowAreRefusedBeforeAllocating) {
  expect_error<ShapeError>([] { Tensor::empty({k2pow62}); }, {"empty", "needs more than 2^63 bytes"});
  expect_error<ShapeError>([] { Tensor::zeros({int64_t{1} << 40, int64_t{1} << 40}); }, {"needs more than 2^63 bytes"});
  expect_error<ShapeError>([] { Tensor::zeros({3}).reshape({k2pow62, 4}); }, {"overflows int64"});
}

TEST(CheckedSizes, AllocatorFailureThrowsBadAllocAndKeepsItsCounters) {
  for (const auto& alloc : {make_caching_allocator(), make_system_allocator()}) {
    EXPECT_THROW(alloc->allocate(std::numeric_limits<size_t>::max()), std::bad_alloc);
    EXPECT_THROW(alloc->allocate(size_t{1} << 62), std::bad_alloc);
    EXPECT_EQ(alloc->bytes_in_use(), 0u);
    void* p = alloc->allocate(100);
    EXPECT_EQ(alloc->bytes_in_use(), 128u);
    alloc->deallocate(p, 100);
    EXPECT_EQ(alloc->bytes_in_use(), 0u);
  }
}

// A tensor too large to allocate fails with bad_alloc, and the tensors made
// before it are freed as the exception unwinds (no std::terminate).
TEST(CheckedSizes, OutOfMemoryUnwindsCleanly) {
  auto build = [] {
    std::vector<Tensor> made;
    for (int i = 0; i < 4; ++i) made.push_back(Tensor::zeros({1024}));
    made.push_back(Tensor::empty({int64_t{1} << 60}));  // 4 EiB: no machine has it
  };
  EXPECT_THROW(build(), std::bad_alloc);
}

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab = 11;
  c.context = 7;
  c.d_model = 8;
  c.heads = 2;
  c.d_ff = 12;
  c.layers = 2;
  return c;
}

TransformerConfig tiny_seq2seq() {
  TransformerConfig c;
  c.src_vocab = 9;
  c.tgt_vocab = 13;
  c.d_model = 8;
  c.heads = 4;
  c.d_ff = 12;
  c.enc_layers = 2;
  c.dec_layers = 1;
  c.max_len = 10;
  c.dropout = 0;
  return c;
}

int64_t state_numel_of(const Module& m) {
  int64_t n = 0;
  for (const auto& [name, t] : m.state_dict()) n += t.numel();
  return n;
}

TEST(ConfigSizes, GPTParameterCountMatchesTheBuiltModel) {
  for (bool tied : {false, true})
    for (auto positions : {PositionalEncoding::Kind::learned, PositionalEncoding::Kind::sinusoidal})
      for (int64_t layers : {1, 3}) {
        GPTConfig c = tiny_gpt();
        c.tie_embeddings = tied;
        c.positions = positions;
        c.layers = layers;
        Generator gen(1);
        const GPT model(c, gen);
        SCOPED_TRACE(c.to_json().dump());
        EXPECT_EQ(c.parameter_count(), model.num_parameters());
        EXPECT_EQ(c.state_numel(), state_numel_of(model));
      }
}

TEST(ConfigSizes, Seq2SeqParameterCountMatchesTheBuiltModel) {
  for (bool tied : {false, true})
    for (bool pre_ln : {false, true})
      for (int64_t kv_heads : {4, 2, 1})
        for (int64_t enc_layers : {0, 2}) {
          TransformerConfig c = tiny_seq2seq();
          c.tie_embeddings = tied;
          c.pre_ln = pre_ln;
          c.kv_heads = kv_heads;
          c.enc_layers = enc_layers;
          Generator gen(1);
          const Seq2SeqTransformer model(c, gen, nullptr);
          SCOPED_TRACE(c.to_json().dump());
          EXPECT_EQ(c.parameter_count(), model.num_parameters());
          EXPECT_EQ(c.state_numel(), state_numel_of(model));
        }
}

// The probe's crafted configs (B1, B5, W5) are refused by from_json, before
// any weight is allocated.
TEST(ConfigSizes, CraftedGPTConfigsAreRefused) {
  const nlohmann::json good = tiny_gpt().to_json();
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = std::move(v);
    return j;
  };
  EXPECT_NO_THROW(GPTConfig::from_json(good));
  expect_error<ValueError>([&] { GPTConfig::from_json(with("d_ff", k2pow62)); }, {"GPTConfig", "d_ff must be in [1, "});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("vocab", k2pow62)); }, {"vocab must be in"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("layers", 100'000'000)); }, {"layers must be in"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("context", int64_t{1000000000000})); }, {"context"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("d_model", 16.5)); }, {"'d_model' is 16.5, expected an integer"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("d_model", "16")); }, {"expected an integer"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("heads", uint64_t{1} << 63)); }, {"past int64"});
  expect_error<ValueError>([&] { GPTConfig::from_json(with("layer_norm_eps", -1)); }, {"layer_norm_eps"});
  expect_error<ValueError>([&] { GPTConfig::from_json(nlohmann::json::array()); }, {"expected an object"});
}

TEST(ConfigSizes, CraftedSeq2SeqConfigsAreRefused) {
  const nlohmann::json good = tiny_seq2seq().to_json();
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    j[key] = std::move(v);
    return j;
  };
  EXPECT_NO_THROW(TransformerConfig::from_json(good));
  expect_error<ValueError>([&] { TransformerConfig::from_json(with("d_ff", k2pow62)); }, {"d_ff must be in"});
  expect_error<ValueError>([&] { TransformerConfig::from_json(with("tgt_vocab", k2pow62)); }, {"tgt_vocab"});
  expect_error<ValueError>([&] { TransformerConfig::from_json(with("dec_layers", 100'000'000)); }, {"dec_layers"});
  expect_error<ValueError>([&] { TransformerConfig::from_json(with("max_len", k2pow62)); }, {"max_len"});
  expect_error<ValueError>([&] { TransformerConfig::from_json(with("kv_heads", 1.5)); }, {"'kv_heads' is 1.5"});
}

// At the limits every count still fits int64: the limits, not luck, keep them finite.
TEST(ConfigSizes, CountsAtTheLimitsFitInt64) {
  GPTConfig g = tiny_gpt();
  g.vocab = config_sizes::kMaxVocab;
  g.d_model = config_sizes::kMaxWidth;
  g.d_ff = config_sizes::kMaxFFWidth;
  g.layers = config_sizes::kMaxLayers;
  g.context = config_sizes::kMaxLength;
  g.tie_embeddings = false;
  EXPECT_GT(g.parameter_count(), int64_t{1} << 45);
  TransformerConfig t = tiny_seq2seq();
  t.src_vocab = t.tgt_vocab = config_sizes::kMaxVocab;
  t.d_model = config_sizes::kMaxWidth;
  t.d_ff = config_sizes::kMaxFFWidth;
  t.enc_layers = t.dec_layers = config_sizes::kMaxLayers;
  t.max_len = config_sizes::kMaxLength;
  EXPECT_GT(t.state_numel(), int64_t{1} << 45);
}

}  // namespace
