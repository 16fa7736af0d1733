// Tensor::version() and what is kept from a weight: every in-place write the
// library makes gives the storage a new version, shared by its views; the
// decode step's stacked q | k | v and the GEMM layer's kept wᵀ follow the
// version, so a copy_, an optimizer step or a load_state_dict between two
// steps on one cache gives the new weights' logits (the graph's), never the
// old ones, and remaking a kept wᵀ takes no new memory.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/nn/transformer.h>
#include <attograd/optim/sgd.h>
#include <attograd/version.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

TEST(WeightVersion, EveryInPlaceWriteGivesANewVersionSharedByViews) {
  Tensor t = randn({4, 3}, 1, DType::f32);
  const Tensor view = t.narrow(0, 1, 2);
  EXPECT_EQ(view.version(), t.version());
  EXPECT_NE(randn({4, 3}, 1, DType::f32).version(), t.version());  // unique across storages
  int64_t last = t.version();
  auto changed = [&](const char* what) {
    EXPECT_GT(t.version(), last) << what;
    EXPECT_EQ(view.version(), t.version()) << what;
    last = t.version();
  };
  t.copy_(randn({4, 3}, 2, DType::f32));
  changed("copy_");
  t.fill_(0.5);
  changed("fill_");
  add_(t, randn({4, 3}, 3, DType::f32));
  changed("add_");
  Tensor v2 = view;
  v2.fill_(2);  // through a view
  changed("a view's fill_");
  t.bump_version();
  changed("bump_version");
  (void)t.data<float>();  // reading, or writing without bump_version(), keeps the version
  EXPECT_EQ(t.version(), last);
}

TEST(WeightVersion, OptimizerStepLoadStateDictAndSetDataChangeTheVersion) {
  Generator gen(4);
  Linear l(3, 2, gen);
  const int64_t w0 = l.weight.version(), b0 = l.bias.version();
  optim::SGD opt(l.parameters(), {.lr = 0.1});
  l.weight.set_grad(Tensor::ones({2, 3}));
  opt.step();
  EXPECT_GT(l.weight.version(), w0);
  EXPECT_EQ(l.bias.version(), b0);  // no gradient: not written
  const int64_t w1 = l.weight.version();
  Linear other(3, 2, gen);
  l.load_state_dict(other.state_dict());
  EXPECT_GT(l.weight.version(), w1);
  EXPECT_GT(l.bias.version(), b0);
  const int64_t w2 = l.weight.version();
  l.weight.set_data_(Tensor::zeros({2, 3}));  // another storage: another version
  EXPECT_NE(l.weight.version(), w2);
}

std::unique_ptr<Seq2SeqTransformer> model(uint64_t seed) {
  TransformerConfig c;
  c.src_vocab = 11;
  c.tgt_vocab = 13;
  c.d_model = 32;
  c.heads = 4;
  c.d_ff = 48;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.max_len = 24;
  Generator gen(seed);
  auto m = std::make_unique<Seq2SeqTransformer>(c, gen, nullptr);
  randomize_parameters(*m, seed + 1, 0.3);
  m->eval();
  return m;
}

// The weights an update between steps 0 and 1 may change while the cache's
// keys and values of step 0 stay what the graph computes: the last decoder
// layer's beyond its self-attention keys and values (its query, stacked with
// them, included), and the generator.
bool after_the_cache(const std::string& name) {
  for (const char* prefix : {"decoder.layers.1.self_attn.q_proj.", "decoder.layers.1.self_attn.out_proj.",
                             "decoder.layers.1.cross_attn.q_proj.", "decoder.layers.1.ff.", "generator."})
    if (name.starts_with(prefix)) return true;
  return false;
}

// Three sources of length 5.
Tensor kSrcIds() { return ids({3, 4, 5, 6, 7, 8, 9, 3, 4, 2, 5, 4, 6, 10, 3}, {3, 5}); }

enum class Update { copy, sgd, load_state_dict };

void update(Seq2SeqTransformer& m, Update how) {
  Generator gen(9);
  std::vector<Tensor> params;
  TensorMap state;
  for (auto& [name, p] : m.named_parameters()) {
    if (!after_the_cache(name)) continue;
    const Tensor fresh = Tensor::randn(p.shape(), gen, p.dtype()) * 0.3;
    params.push_back(p);
    state[name] = fresh;
    if (how == Update::copy) {
      NoGradGuard no_grad;
      Tensor(p).copy_(fresh);
    }
    if (how == Update::sgd) p.set_grad(fresh);
  }
  ASSERT_EQ(params.size(), 12u);  // weight and bias of six linear layers
  if (how == Update::sgd) {
    optim::SGD opt(params, {.lr = 1});
    opt.step();
    opt.zero_grad();
  }
  if (how == Update::load_state_dict) m.load_state_dict(state, false);
}

class StaleWeights : public ::testing::TestWithParam<std::tuple<Update, GemmBackend>> {};

// Step 1 after the update equals the graph's forward with the new weights and
// differs from step 1 with the old ones, on OpenBLAS (which reads w) and on
// libxsmm (which reads the GEMM layer's kept wᵀ: it was made by the first
// cache's steps, so a stale one would be served).
TEST_P(StaleWeights, AnUpdateBetweenStepsGivesTheNewWeightsLogits) {
  const auto [how, lib] = GetParam();
  if (lib == GemmBackend::xsmm && !build_features().xsmm) GTEST_SKIP() << "built without libxsmm (ATTOGRAD_XSMM=OFF)";
  GemmBackendGuard backend(lib);
  auto m = model(3);
  NoGradGuard no_grad;
  const Tensor tgt = ids({1, 4, 1, 7, 1, 12}, {3, 2});
  const Tensor memory = m->encode(kSrcIds());
  const std::vector<int64_t> first = tgt.narrow(1, 0, 1).to_vector<int64_t>();
  const std::vector<int64_t> second = tgt.narrow(1, 1, 1).to_vector<int64_t>();
  KVCache old_cache = m->make_cache(), cache = m->make_cache();
  m->decode_step(first, old_cache, memory);
  const Tensor old_logits = m->decode_step(second, old_cache, memory).clone();
  m->decode_step(first, cache, memory);
  update(*m, how);
  const Tensor logits = m->decode_step(second, cache, memory);
  const Tensor graph = m->forward(kSrcIds(), tgt).narrow(1, 1, 1).reshape({3, 13});
  expect_close(logits, graph, 1e-4, 1e-5);
  const Tensor gap = max(abs(sub(logits, old_logits)));
  EXPECT_GT(gap.item(), 0.1) << "the update must change the logits for the test to mean anything";
}

INSTANTIATE_TEST_SUITE_P(Paths, StaleWeights,
                         ::testing::Combine(::testing::Values(Update::copy, Update::sgd, Update::load_state_dict),
                                            ::testing::Values(GemmBackend::openblas, GemmBackend::xsmm)));

// On libxsmm every step reads the kept wᵀ: a hit takes no memory, and a
// weight written in place has its wᵀ remade in the same buffer.
TEST(StaleWeights, KeptTransposesTakeNoNewMemoryAfterWarmUp) {
  if (!build_features().xsmm) GTEST_SKIP() << "built without libxsmm (ATTOGRAD_XSMM=OFF)";
  GemmBackendGuard backend(GemmBackend::xsmm);
  auto m = model(5);
  NoGradGuard no_grad;
  const Tensor memory = m->encode(kSrcIds());
  KVCache cache = m->make_cache();
  const std::vector<int64_t> step{4, 5, 6};
  Allocator& a = default_allocator();
  for (int t = 0; t < 2; ++t) m->decode_step(step, cache, memory);
  Generator gen(2);
  const Tensor fresh = Tensor::randn(m->generator->weight.shape(), gen, DType::f32);
  const size_t in_use = a.bytes_in_use(), held = a.bytes_in_use() + a.bytes_cached();
  for (int t = 2; t < 8; ++t) {
    if (t == 4) m->generator->weight.copy_(fresh);
    m->decode_step(step, cache, memory);
    EXPECT_EQ(a.bytes_in_use(), in_use) << "step " << t;
    EXPECT_EQ(a.bytes_in_use() + a.bytes_cached(), held) << "step " << t;
  }
}

}  // namespace
