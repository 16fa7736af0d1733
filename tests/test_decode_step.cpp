// decode_step (attograd/nn/inference.h) against the training-graph forward: logits of
// every step equal the graph's cached step and the teacher-forced full
// forward's, greedy and beam search decode the same tokens as the graph (no
// cache: the whole prefix through the ops each step), for the seq2seq model
// (pre-LN and post-LN, ReLU and GELU, multi-head and grouped-query, padded
// sources) and the GPT; decode()/forward() always run the graph, and
// decode_step names the condition it needs when one fails; a step takes no
// new memory.
#include <gtest/gtest.h>

#include <optional>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/nn/generate.h>
#include <attograd/nn/gpt.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

struct Variant {
  bool pre_ln;
  Activation act;
  std::optional<int64_t> kv_heads;
  bool tie;
};

std::unique_ptr<Seq2SeqTransformer> model(const Variant& v, uint64_t seed) {
  TransformerConfig c;
  c.src_vocab = 11;
  c.tgt_vocab = 13;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = v.kv_heads;
  c.d_ff = 48;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.dropout = 0.1;  // eval mode turns it off; the decode step must too
  c.max_len = 24;
  c.pre_ln = v.pre_ln;
  c.activation = v.act;
  c.tie_embeddings = v.tie;
  Generator gen(seed);
  auto m = std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
  randomize_parameters(*m, seed + 1, 0.3);
  m->eval();
  return m;
}

// Three sources of length 5, the last two padded.
const Tensor kSrc = ids({3, 4, 5, 6, 7, 8, 9, 3, 0, 0, 5, 4, 0, 0, 0}, {3, 5});

class DecodeStepSeq2Seq : public ::testing::TestWithParam<Variant> {};

void check_steps_against_graph(const Variant& v, double tol) {
  auto m = model(v, 1);
  NoGradGuard no_grad;
  const Tensor kpm = eq(kSrc, Tensor::zeros({}, DType::i64));
  const Tensor tgt = ids({1, 4, 7, 2, 9, 11, 1, 5, 5, 8, 3, 12, 1, 12, 6, 6, 10, 4}, {3, 6});
  const Tensor full = m->forward(kSrc, tgt, kpm);  // [3, 6, 13], teacher-forced
  const Tensor memory = m->encode(kSrc, kpm);
  KVCache cache = m->make_cache(), graph_cache = m->make_cache();
  for (int64_t t = 0; t < 6; ++t) {
    const std::vector<int64_t> step = tgt.narrow(1, t, 1).to_vector<int64_t>();
    const Tensor logits = m->decode_step(step, cache, memory, kpm);  // [3, 13]
    GradModeGuard graph_mode(true);  // the graph with its autograd records, as in training
    const Tensor graph = m->decode(tgt.narrow(1, t, 1), memory, kpm, Tensor(), &graph_cache).detach();
    expect_close(logits, graph.reshape({3, 13}), tol, tol);
    expect_close(logits, full.narrow(1, t, 1).reshape({3, 13}), 1e-5, 1e-5);
  }
  EXPECT_EQ(cache.length(), 6);
  EXPECT_EQ(graph_cache.step, nullptr);
}

// Each step's logits: equal to the graph's cached step, and within float
// rounding of the teacher-forced full forward (whose GEMMs have B·T rows
// instead of B, a last-bit difference). On OpenBLAS the decode step's products
// give the graph's bits exactly. libxsmm's JIT kernels may round differently
// per shape, and the decode step's packed q | k | v product has another shape
// than the graph's three, so on the default routing the two agree to float32
// rounding (with G < H K/V heads: up to 7e-7 on logits of size 1-2).
TEST_P(DecodeStepSeq2Seq, StepLogitsEqualTheGraphForward) {
  for (const bool exact : {true, false}) {
    std::optional<GemmBackendGuard> openblas;
    if (exact) openblas.emplace(GemmBackend::openblas);
    const double tol = exact ? 0 : 2e-6;
    check_steps_against_graph(GetParam(), tol);
  }
}

TEST_P(DecodeStepSeq2Seq, GreedyAndBeamDecodeTheGraphsTokens) {
  auto m = model(GetParam(), 2);
  const Tensor kpm = eq(kSrc, Tensor::zeros({}, DType::i64));
  DecodeOptions step{.max_len = 12, .bos_id = 1, .eos_id = 2, .use_cache = true};  // decode_step
  DecodeOptions graph = step;
  graph.use_cache = false;
  for (auto [a, b] : {std::pair{greedy_decode(*m, kSrc, kpm, step), greedy_decode(*m, kSrc, kpm, graph)},
                      std::pair{beam_search(*m, kSrc, kpm, step, {.beam = 3}),
                                beam_search(*m, kSrc, kpm, graph, {.beam = 3})}}) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tokens, b[i].tokens) << "row " << i;
      EXPECT_NEAR(a[i].log_prob, b[i].log_prob, 1e-4) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, DecodeStepSeq2Seq,
                         ::testing::Values(Variant{true, Activation::relu, std::nullopt, false},
                                           Variant{true, Activation::gelu, 2, true},
                                           Variant{false, Activation::relu, 1, false},
                                           Variant{false, Activation::gelu, std::nullopt, true}));

// decode() is the graph whatever its arguments (it never fills the step's
// state); decode_step refuses, naming the condition, what it cannot run.
TEST(DecodeStep, DecodeIsTheGraphAndDecodeStepNamesWhatItNeeds) {
  auto m = model({true, Activation::relu, 2, false}, 3);
  const Tensor memory = [&] { NoGradGuard g; return m->encode(kSrc); }();
  const Tensor step = ids({1, 1, 1}, {3, 1});
  const std::vector<int64_t> one{1, 1, 1};
  {
    KVCache cache = m->make_cache();
    expect_error<ValueError>([&] { m->decode_step(one, cache, memory); }, {"grad mode is on", "NoGradGuard"});
  }
  NoGradGuard no_grad;
  {
    KVCache cache = m->make_cache();
    m->decode(ids({1, 4, 1, 5, 1, 6}, {3, 2}), memory, Tensor(), Tensor(), &cache);  // two tokens: the graph
    const Tensor graph = m->decode(step, memory, Tensor(), Tensor(), &cache);  // one token, grad off: still the graph
    EXPECT_EQ(cache.step, nullptr);
    EXPECT_EQ(graph.shape(), (Shape{3, 1, 13}));
    const Tensor s = m->decode_step(one, cache, memory);  // the step continues the graph's cache
    EXPECT_NE(cache.step, nullptr);
    EXPECT_EQ(s.shape(), (Shape{3, 13}));
    cache.reset();
    EXPECT_EQ(cache.step, nullptr);
  }
  {
    m->train();
    KVCache cache = m->make_cache();
    expect_error<ValueError>([&] { m->decode_step(one, cache, memory); }, {"training mode", "eval()"});
    m->eval();
  }
  {
    AttentionObserverGuard watch(*m, [](const std::string&) { return [](AttentionCall&) {}; });
    KVCache cache = m->make_cache();
    expect_error<ValueError>([&] { m->decode_step(one, cache, memory); },
                             {"decoder.layers.0.self_attn", "observer", "decode()"});
  }
  {
    KVCache cache(1);  // a one-layer cache for a two-layer decoder
    expect_error<ValueError>([&] { m->decode_step(one, cache, memory); }, {"1 layers", "make_cache()"});
  }
  {
    KVCache cache = m->make_cache();
    for (int64_t t = 0; t < m->config.max_len; ++t) m->decode_step(one, cache, memory);
    expect_error<ShapeError>([&] { m->decode_step(one, cache, memory); }, {"position 24", "24 positions"});
  }
}

TEST(DecodeStep, BadIdsAndMismatchedRowsAreErrors) {
  auto m = model({true, Activation::relu, std::nullopt, false}, 4);
  NoGradGuard no_grad;
  const Tensor memory = m->encode(kSrc);
  KVCache cache = m->make_cache();
  expect_error<IndexError>([&] { m->decode_step(std::vector<int64_t>{1, 13, 1}, cache, memory); },
                           {"id 13", "out of range"});
  KVCache c2 = m->make_cache();
  m->decode_step(std::vector<int64_t>{1, 1, 1}, c2, memory);
  expect_error<ShapeError>([&] { m->decode_step(std::vector<int64_t>{1, 1}, c2, memory.narrow(0, 0, 2)); },
                           {"do not match the cache", "reset()"});
}

TEST(DecodeStep, AStepTakesNoNewMemoryAfterWarmUp) {
  auto m = model({true, Activation::gelu, 2, false}, 5);
  NoGradGuard no_grad;
  const Tensor memory = m->encode(kSrc);
  KVCache cache = m->make_cache();
  const std::vector<int64_t> step{4, 5, 6};
  Allocator& a = default_allocator();
  for (int t = 0; t < 2; ++t) m->decode_step(step, cache, memory);  // packs weights, sizes buffers
  // The cache's first 16 rows and the scores' first 16 columns are already there.
  const size_t in_use = a.bytes_in_use(), held = a.bytes_in_use() + a.bytes_cached();
  for (int t = 2; t < 12; ++t) {
    m->decode_step(step, cache, memory);
    EXPECT_EQ(a.bytes_in_use(), in_use) << "step " << t;
    EXPECT_EQ(a.bytes_in_use() + a.bytes_cached(), held) << "step " << t;
  }
  // The graph step, by contrast, keeps what it returns.
  const Tensor kept = m->decode(ids({4, 5, 6}, {3, 1}), memory, Tensor(), Tensor(), &cache);
  EXPECT_GT(a.bytes_in_use(), in_use);
}

// Forty rows: the step runs as two row blocks of 20, every product on 20
// rows instead of 40, the blocks on the pool's threads. The logits are the
// same bits on 1 and 2 threads (on either routing), and equal the graph's
// cached step to float32 rounding: its products take all 40 rows at once, and
// OpenBLAS rounds some rows differently with the row count (a last bit or
// two), so the bit-for-bit agreement above holds up to 32 rows (one block).
TEST(DecodeStep, RowBlocksGiveTheSameBitsOnOneAndTwoThreads) {
  auto m = model({true, Activation::gelu, std::nullopt, false}, 7);
  NoGradGuard no_grad;
  constexpr int64_t B = 40, S = 5, steps = 5;
  std::vector<int64_t> src(B * S);
  for (int64_t i = 0; i < B * S; ++i) src[i] = 3 + (i * 7 + i / S) % 8;
  const Tensor memory = m->encode(ids(src, {B, S}));
  auto step_ids = [](int64_t t) {
    std::vector<int64_t> v(B);
    for (int64_t b = 0; b < B; ++b) v[b] = (b * 5 + t * 3) % 13;
    return v;
  };
  auto stepped = [&](int threads) {
    set_num_threads(threads);
    KVCache cache = m->make_cache();
    std::vector<std::vector<float>> out;
    for (int64_t t = 0; t < steps; ++t) out.push_back(m->decode_step(step_ids(t), cache, memory).to_vector<float>());
    return out;
  };
  const int before = num_threads();
  for (const bool exact : {true, false}) {
    std::optional<GemmBackendGuard> openblas;
    if (exact) openblas.emplace(GemmBackend::openblas);
    const auto one = stepped(1), two = stepped(2);
    EXPECT_EQ(one, two) << (exact ? "openblas" : "default routing");
    if (!exact) continue;
    KVCache graph_cache = m->make_cache();
    GradModeGuard graph_mode(true);
    for (int64_t t = 0; t < steps; ++t) {
      const Tensor graph = m->decode(ids(step_ids(t), {B, 1}), memory, Tensor(), Tensor(), &graph_cache);
      expect_close(Tensor::from_vector(two[t], {B, 13}), graph.detach().reshape({B, 13}), 2e-6, 2e-6);
    }
  }
  set_num_threads(before);
}

GPTConfig gpt_config() {
  GPTConfig c;
  c.vocab = 9;
  c.context = 10;
  c.d_model = 24;
  c.heads = 3;
  c.d_ff = 40;
  c.layers = 2;
  return c;
}

TEST(DecodeStep, GPTStepsEqualTheGraphForwardAfterAPrompt) {
  Generator gen(6);
  GPT m(gpt_config(), gen);
  m.eval();
  NoGradGuard no_grad;
  const Tensor seq = ids({1, 4, 2, 6, 0, 3, 5, 8, 2, 1, 0, 6, 7, 7, 3, 2, 8, 1, 4, 4, 0}, {3, 7});
  const Tensor full = m.forward(seq);  // [3, 7, 9], the graph
  KVCache cache = m.make_cache();
  expect_close(m.forward(seq.narrow(1, 0, 2), &cache), full.narrow(1, 0, 2), 1e-5, 1e-6);  // prompt: the graph
  EXPECT_EQ(cache.step, nullptr);
  for (int64_t t = 2; t < 7; ++t) {
    const std::vector<int64_t> step = seq.narrow(1, t, 1).to_vector<int64_t>();
    expect_close(m.decode_step(step, cache), full.narrow(1, t, 1).reshape({3, 9}), 1e-5, 1e-6);
  }
  EXPECT_NE(cache.step, nullptr);
  // GPT::forward with a cache stays the graph for one token too, returning [B, 1, V].
  KVCache c2 = m.make_cache();
  for (int64_t t = 0; t < 7; ++t)
    expect_close(m.forward(seq.narrow(1, t, 1), &c2), full.narrow(1, t, 1), 1e-5, 1e-6);
  EXPECT_EQ(c2.step, nullptr);
  // And the step names what it needs: a position left in the context.
  KVCache c3 = m.make_cache();
  const std::vector<int64_t> row{1, 2, 3};
  for (int64_t t = 0; t < m.config.context; ++t) m.decode_step(row, c3);
  expect_error<ShapeError>([&] { m.decode_step(row, c3); }, {"GPT::decode_step", "position 10"});
}

}  // namespace
