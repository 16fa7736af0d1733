// The lean decoding step (nn/inference.h) against the training-graph forward:
// logits of every step equal the teacher-forced full forward's, greedy and
// beam search decode the same tokens as the graph (no cache: the whole prefix
// through the ops each step), for the seq2seq model (pre-LN and post-LN, ReLU
// and GELU, multi-head and grouped-query, padded sources) and the GPT; the
// lean path is taken only when it applies; a step takes no new memory.
#include <gtest/gtest.h>

#include <optional>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/nn/generate.h>
#include <attograd/nn/gpt.h>
#include <attograd/nn/inference.h>

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
  c.dropout = 0.1;  // eval mode turns it off; the lean step must too
  c.max_len = 24;
  c.pre_ln = v.pre_ln;
  c.activation = v.act;
  c.tie_embeddings = v.tie;
  Generator gen(seed);
  auto m = std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
  // Larger random weights than the init, so that every path matters to the logits.
  NoGradGuard no_grad;
  Generator w(seed + 1);
  for (auto& [name, p] : m->named_parameters()) p.copy_(Tensor::randn(p.shape(), w, p.dtype()) * 0.3);
  m->eval();
  return m;
}

// Three sources of length 5, the last two padded.
const Tensor kSrc = ids({3, 4, 5, 6, 7, 8, 9, 3, 0, 0, 5, 4, 0, 0, 0}, {3, 5});

class LeanSeq2Seq : public ::testing::TestWithParam<Variant> {};

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
    const Tensor logits = lean_decode_step(*m, step, memory, kpm, cache);  // [3, 13]
    GradModeGuard graph_mode(true);  // grad mode on: decode takes the graph
    const Tensor graph = m->decode(tgt.narrow(1, t, 1), memory, kpm, Tensor(), &graph_cache).detach();
    expect_close(logits, graph.reshape({3, 13}), tol, tol);
    expect_close(logits, full.narrow(1, t, 1).reshape({3, 13}), 1e-5, 1e-5);
  }
  EXPECT_EQ(cache.length(), 6);
  EXPECT_EQ(graph_cache.lean, nullptr);
}

// Each step's logits: equal to the graph's cached step, and within float
// rounding of the teacher-forced full forward (whose GEMMs have B·T rows
// instead of B, a last-bit difference). On OpenBLAS the lean step's products
// give the graph's bits exactly. libxsmm's JIT kernels may round differently
// per shape, and the lean step's packed q | k | v product has another shape
// than the graph's three, so on the default routing the two agree to float32
// rounding (with G < H K/V heads: up to 7e-7 on logits of size 1-2).
TEST_P(LeanSeq2Seq, StepLogitsEqualTheGraphForward) {
  for (const bool exact : {true, false}) {
    std::optional<GemmBackendGuard> openblas;
    if (exact) openblas.emplace(GemmBackend::openblas);
    const double tol = exact ? 0 : 2e-6;
    check_steps_against_graph(GetParam(), tol);
  }
}

TEST_P(LeanSeq2Seq, GreedyAndBeamDecodeTheGraphsTokens) {
  auto m = model(GetParam(), 2);
  const Tensor kpm = eq(kSrc, Tensor::zeros({}, DType::i64));
  DecodeOptions lean{.max_len = 12, .bos_id = 1, .eos_id = 2, .use_cache = true};
  DecodeOptions graph = lean;
  graph.use_cache = false;
  for (auto [a, b] : {std::pair{greedy_decode(*m, kSrc, kpm, lean), greedy_decode(*m, kSrc, kpm, graph)},
                      std::pair{beam_search(*m, kSrc, kpm, lean, {.beam = 3}),
                                beam_search(*m, kSrc, kpm, graph, {.beam = 3})}}) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tokens, b[i].tokens) << "row " << i;
      EXPECT_NEAR(a[i].log_prob, b[i].log_prob, 1e-4) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, LeanSeq2Seq,
                         ::testing::Values(Variant{true, Activation::relu, std::nullopt, false},
                                           Variant{true, Activation::gelu, 2, true},
                                           Variant{false, Activation::relu, 1, false},
                                           Variant{false, Activation::gelu, std::nullopt, true}));

TEST(LeanDecode, DecodeTakesTheLeanStepOnlyWhenItApplies) {
  auto m = model({true, Activation::relu, 2, false}, 3);
  const Tensor memory = [&] { NoGradGuard g; return m->encode(kSrc); }();
  const Tensor step = ids({1, 1, 1}, {3, 1});
  {
    KVCache cache = m->make_cache();
    m->decode(step, memory, Tensor(), Tensor(), &cache);  // grad mode on: the graph
    EXPECT_EQ(cache.lean, nullptr);
  }
  NoGradGuard no_grad;
  {
    KVCache cache = m->make_cache();
    m->decode(ids({1, 4, 1, 5, 1, 6}, {3, 2}), memory, Tensor(), Tensor(), &cache);  // two tokens: the graph
    EXPECT_EQ(cache.lean, nullptr);
    const Tensor lean = m->decode(step, memory, Tensor(), Tensor(), &cache);  // then one: lean
    EXPECT_NE(cache.lean, nullptr);
    EXPECT_EQ(lean.shape(), (Shape{3, 1, 13}));
    cache.reset();
    EXPECT_EQ(cache.lean, nullptr);
  }
  {
    m->train();
    KVCache cache = m->make_cache();
    m->decode(step, memory, Tensor(), Tensor(), &cache);
    EXPECT_EQ(cache.lean, nullptr);
    m->eval();
  }
  {
    AttentionObserverGuard watch(*m, [](const std::string&) { return [](AttentionCall&) {}; });
    KVCache cache = m->make_cache();
    m->decode(step, memory, Tensor(), Tensor(), &cache);
    EXPECT_EQ(cache.lean, nullptr);
  }
}

TEST(LeanDecode, BadIdsAndMismatchedRowsAreErrors) {
  auto m = model({true, Activation::relu, std::nullopt, false}, 4);
  NoGradGuard no_grad;
  const Tensor memory = m->encode(kSrc);
  KVCache cache = m->make_cache();
  expect_error<IndexError>([&] { lean_decode_step(*m, std::vector<int64_t>{1, 13, 1}, memory, Tensor(), cache); },
                           {"id 13", "out of range"});
  KVCache c2 = m->make_cache();
  lean_decode_step(*m, std::vector<int64_t>{1, 1, 1}, memory, Tensor(), c2);
  expect_error<ShapeError>([&] { lean_decode_step(*m, std::vector<int64_t>{1, 1}, memory, Tensor(), c2); },
                           {"do not match the cache", "reset()"});
}

TEST(LeanDecode, AStepTakesNoNewMemoryAfterWarmUp) {
  auto m = model({true, Activation::gelu, 2, false}, 5);
  NoGradGuard no_grad;
  const Tensor memory = m->encode(kSrc);
  KVCache cache = m->make_cache();
  const std::vector<int64_t> step{4, 5, 6};
  Allocator& a = default_allocator();
  for (int t = 0; t < 2; ++t) lean_decode_step(*m, step, memory, Tensor(), cache);  // packs weights, sizes buffers
  // The cache's first 16 rows and the scores' first 16 columns are already there.
  const size_t in_use = a.bytes_in_use(), held = a.bytes_in_use() + a.bytes_cached();
  for (int t = 2; t < 12; ++t) {
    lean_decode_step(*m, step, memory, Tensor(), cache);
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
TEST(LeanDecode, RowBlocksGiveTheSameBitsOnOneAndTwoThreads) {
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
  auto lean = [&](int threads) {
    set_num_threads(threads);
    KVCache cache = m->make_cache();
    std::vector<std::vector<float>> out;
    for (int64_t t = 0; t < steps; ++t) out.push_back(lean_decode_step(*m, step_ids(t), memory, Tensor(), cache).to_vector<float>());
    return out;
  };
  const int before = num_threads();
  for (const bool exact : {true, false}) {
    std::optional<GemmBackendGuard> openblas;
    if (exact) openblas.emplace(GemmBackend::openblas);
    const auto one = lean(1), two = lean(2);
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

TEST(LeanDecode, GPTStepsEqualTheGraphForwardAfterAPrompt) {
  Generator gen(6);
  GPT m(gpt_config(), gen);
  m.eval();
  NoGradGuard no_grad;
  const Tensor seq = ids({1, 4, 2, 6, 0, 3, 5, 8, 2, 1, 0, 6, 7, 7, 3, 2, 8, 1, 4, 4, 0}, {3, 7});
  const Tensor full = m.forward(seq);  // [3, 7, 9], the graph
  KVCache cache = m.make_cache();
  expect_close(m.forward(seq.narrow(1, 0, 2), &cache), full.narrow(1, 0, 2), 1e-5, 1e-6);  // prompt: the graph
  EXPECT_EQ(cache.lean, nullptr);
  for (int64_t t = 2; t < 7; ++t) {
    const std::vector<int64_t> step = seq.narrow(1, t, 1).to_vector<int64_t>();
    expect_close(lean_gpt_step(m, step, cache), full.narrow(1, t, 1).reshape({3, 9}), 1e-5, 1e-6);
  }
  EXPECT_NE(cache.lean, nullptr);
  // GPT::forward takes the lean step for one token, returning [B, 1, V].
  KVCache c2 = m.make_cache();
  for (int64_t t = 0; t < 7; ++t)
    expect_close(m.forward(seq.narrow(1, t, 1), &c2), full.narrow(1, t, 1), 1e-5, 1e-6);
  EXPECT_NE(c2.lean, nullptr);
}

}  // namespace
