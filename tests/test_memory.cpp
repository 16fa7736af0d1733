// The memory trades of attograd/autograd/memory.h: for each choice, that the
// gradients equal the other choice's (attention bit for bit, layer norm to
// float rounding) while the saved bytes shrink as documented. Parsing the
// setting and its guard: test_settings.cpp.
#include <gtest/gtest.h>

#include <attograd/autograd/backend/allocator.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/memory.h>
#include <attograd/autograd/autograd.h>
#include <attograd/nn/transformer.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

const MemoryOptions kFast = parse_memory_options("fast");
const MemoryOptions kLean = parse_memory_options("lean");

// Bytes of the tensors a node saved that nothing else holds (SavedTensor::shares unset).
size_t own_saved_bytes(const Tensor& t) {
  size_t n = 0;
  for (const SavedTensor& s : t.grad_fn()->saved)
    if (s.value.defined() && !s.shares) n += saved_bytes(s);
  return n;
}

bool saves(const Tensor& t, const std::string& name) {
  for (const SavedTensor& s : t.grad_fn()->saved)
    if (s.name == name && s.value.defined()) return true;
  return false;
}

std::vector<double> grad_values(const Tensor& t) { return t.grad().to_vector<double>(); }

// ---- attention ---------------------------------------------------------------

struct AttnCase {
  const char* name;
  int64_t B, H, G, T, S, D;
  bool causal = false;
  bool padding = false;    // key padding, batch 0's keys all padding: fully masked rows
  bool bool_mask = false;  // [B·H, T, S] bool mask
  bool learned_mask = false;  // float [T, S] mask that requires grad
  double dropout = 0;
};

std::vector<AttnCase> attn_cases() {
  return {
      {"self", 2, 4, 4, 5, 5, 3},
      {"causal", 2, 4, 4, 5, 5, 3, true},
      {"padding, fully masked rows", 2, 2, 2, 3, 4, 3, false, true},
      {"cross, T != S, bool mask", 2, 2, 2, 3, 6, 4, false, false, true},
      {"GQA G = 2 of H = 4, causal + padding", 2, 4, 2, 4, 4, 3, true, true},
      {"MQA, learned float mask", 1, 3, 1, 4, 5, 2, false, false, false, true},
      {"dropout", 2, 2, 2, 4, 4, 3, false, false, false, false, 0.3},
  };
}

struct AttnRun {
  Tensor out, weights;
  std::vector<std::vector<double>> grads;  // q, k, v (and the mask)
  size_t own_bytes = 0;
};

AttnRun run_attention(const AttnCase& c, DType dt, const MemoryOptions& mem) {
  MemoryOptionsGuard guard(mem);
  Generator gen(3);
  Tensor q = randn_leaf({c.B, c.H, c.T, c.D}, gen, dt), k = randn_leaf({c.B, c.G, c.S, c.D}, gen, dt);
  Tensor v = randn_leaf({c.B, c.G, c.S, c.D}, gen, dt);
  AttentionOptions o;
  o.is_causal = c.causal;
  o.need_weights = true;
  if (c.padding) {
    std::vector<bool> pad(static_cast<size_t>(c.B * c.S));
    for (int64_t s = 0; s < c.S; ++s) pad[s] = true;                    // batch 0: every key
    if (c.B > 1) pad[static_cast<size_t>(2 * c.S - 1)] = true;          // batch 1: its last key
    o.key_padding_mask = Tensor::from_vector(pad, {c.B, c.S});
  }
  if (c.bool_mask) {
    std::vector<bool> m(static_cast<size_t>(c.B * c.H * c.T * c.S));
    for (size_t i = 0; i < m.size(); ++i) m[i] = gen.uniform() < 0.3;
    o.attn_mask = Tensor::from_vector(m, {c.B * c.H, c.T, c.S});
  }
  if (c.learned_mask) o.attn_mask = randn_leaf({c.T, c.S}, gen, dt);
  Generator drop(5);
  if (c.dropout > 0) {
    o.dropout_p = c.dropout;
    o.generator = &drop;
  }
  AttentionResult r = scaled_dot_product_attention(q, k, v, o);
  AttnRun run{r.out, r.weights, {}, own_saved_bytes(r.out)};
  Generator gg(9);
  r.out.backward(Tensor::randn(r.out.shape(), gg, dt));
  for (const Tensor& t : {q, k, v}) run.grads.push_back(grad_values(t));
  if (c.learned_mask) run.grads.push_back(grad_values(o.attn_mask));
  return run;
}

// Recomputing P from the row statistics gives the very P the forward made, so
// every gradient equals the P-saving backward's bit for bit.
TEST(MemoryAttention, RowStatsGradientsEqualSavedProbabilitiesExactly) {
  for (DType dt : {DType::f32, DType::f64})
    for (const AttnCase& c : attn_cases()) {
      SCOPED_TRACE(fmt::format("{} {}", c.name, dtype_name(dt)));
      const AttnRun lean = run_attention(c, dt, kLean), fast = run_attention(c, dt, kFast);
      EXPECT_EQ(lean.out.to_vector<double>(), fast.out.to_vector<double>());
      EXPECT_EQ(lean.weights.to_vector<double>(), fast.weights.to_vector<double>());
      ASSERT_EQ(lean.grads.size(), fast.grads.size());
      for (size_t i = 0; i < lean.grads.size(); ++i) {
        EXPECT_EQ(lean.grads[i], fast.grads[i]) << "input " << i;
        for (double g : lean.grads[i]) EXPECT_TRUE(std::isfinite(g));
      }
    }
}

// The saved bytes of its own: P [B, H, T, S] against two numbers per row [B, H, T, 2].
TEST(MemoryAttention, RowStatsSaveTwoNumbersPerRowInsteadOfP) {
  for (const AttnCase& c : attn_cases()) {
    SCOPED_TRACE(c.name);
    const AttnRun lean = run_attention(c, DType::f32, kLean), fast = run_attention(c, DType::f32, kFast);
    const size_t rows = static_cast<size_t>(c.B * c.H * c.T), keep = c.dropout > 0 ? rows * c.S : 0;  // b8 mask
    const size_t masks = (c.padding ? c.B * c.S : 0) + (c.bool_mask ? rows * c.S : 0);  // b8 handles, not inputs
    EXPECT_EQ(fast.own_bytes, rows * c.S * 4 + keep + masks);
    EXPECT_EQ(lean.own_bytes, rows * 2 * 4 + keep + masks);
  }
  MemoryOptionsGuard guard(kLean);
  Tensor q = randn_leaf({2, 2, 4, 3}, 1, DType::f32), k = randn_leaf({2, 2, 4, 3}, 2, DType::f32);
  Tensor v = randn_leaf({2, 2, 4, 3}, 3, DType::f32);
  const Tensor out = scaled_dot_product_attention(q, k, v).out;
  EXPECT_FALSE(saves(out, "P"));
  EXPECT_TRUE(saves(out, "row_stats"));
  EXPECT_TRUE(saves(out, "q") && saves(out, "k"));  // recomputing P reads both
}

TEST(MemoryAttention, GradcheckOfTheRecomputingBackward) {
  MemoryOptionsGuard guard(kLean);
  for (const AttnCase& c : attn_cases()) {
    if (c.dropout > 0) continue;  // a fresh mask per evaluation: test_attention checks dropout with a fixed seed
    SCOPED_TRACE(c.name);
    Generator gen(11);
    std::vector<Tensor> in{randn_leaf({c.B, c.H, c.T, c.D}, gen), randn_leaf({c.B, c.G, c.S, c.D}, gen),
                           randn_leaf({c.B, c.G, c.S, c.D}, gen)};
    AttentionOptions o;
    o.is_causal = c.causal;
    if (c.padding) {
      std::vector<bool> pad(static_cast<size_t>(c.B * c.S));
      for (int64_t s = 0; s < c.S; ++s) pad[s] = true;  // batch 0: a fully masked row per query
      o.key_padding_mask = Tensor::from_vector(pad, {c.B, c.S});
    }
    if (c.bool_mask) {
      std::vector<bool> m(static_cast<size_t>(c.B * c.H * c.T * c.S));
      for (size_t i = 0; i < m.size(); i += 3) m[i] = true;
      o.attn_mask = Tensor::from_vector(m, {c.B * c.H, c.T, c.S});
    }
    if (c.learned_mask) in.push_back(randn_leaf({c.T, c.S}, gen));
    expect_gradcheck(
        [o](const std::vector<Tensor>& x) {
          AttentionOptions oo = o;
          if (x.size() == 4) oo.attn_mask = x[3];
          return scaled_dot_product_attention(x[0], x[1], x[2], oo).out;
        },
        in);
  }
}

// ---- layer norm --------------------------------------------------------------

struct NormRun {
  std::vector<std::vector<double>> grads;  // x, weight, bias
  Tensor y;
};

NormRun run_layer_norm(DType dt, const MemoryOptions& mem, bool affine, double w_scale = 1) {
  MemoryOptionsGuard guard(mem);
  const int64_t R = 6, E = 8;
  Generator gen(4);
  Tensor x = randn_leaf({2, R / 2, E}, gen, dt);
  Tensor w = affine ? (Tensor::ones({E}, dt) + Tensor::randn({E}, gen, dt) * 0.3) * w_scale : Tensor();
  Tensor b = affine ? Tensor::randn({E}, gen, dt) * 0.5 : Tensor();
  if (affine) {
    w.requires_grad_();
    b.requires_grad_();
  }
  NormRun run;
  run.y = layer_norm(x, {E}, w, b);
  Generator gg(8);
  run.y.backward(Tensor::randn(run.y.shape(), gg, dt));
  for (const Tensor& t : {x, w, b})
    if (t.defined()) run.grads.push_back(grad_values(t));
  return run;
}

TEST(MemoryLayerNorm, OutputSavingGradientsEqualInputSaving) {
  for (DType dt : {DType::f32, DType::f64})
    for (bool affine : {true, false}) {
      SCOPED_TRACE(fmt::format("{} affine {}", dtype_name(dt), affine));
      const NormRun lean = run_layer_norm(dt, kLean, affine), fast = run_layer_norm(dt, kFast, affine);
      EXPECT_EQ(lean.y.to_vector<double>(), fast.y.to_vector<double>());
      ASSERT_EQ(lean.grads.size(), fast.grads.size());
      const double tol = dt == DType::f64 ? 1e-13 : 2e-6;
      for (size_t i = 0; i < lean.grads.size(); ++i) {
        SCOPED_TRACE(i);
        const std::vector<double>& a = lean.grads[i];
        const std::vector<double>& f = fast.grads[i];
        ASSERT_EQ(a.size(), f.size());
        for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], f[j], tol * (1 + std::abs(f[j]))) << j;
      }
    }
}

TEST(MemoryLayerNorm, OutputSavingKeepsYAndNotX) {
  MemoryOptionsGuard guard(kLean);
  const int64_t R = 6, E = 5;
  Generator gen(3);
  Tensor x = randn_leaf({R, E}, gen, DType::f32);
  Tensor w = (Tensor::randn({E}, gen, DType::f32) * 0.1 + 1.0).requires_grad_();  // |b| ≤ 16·|w|: y gives x̂ back
  Tensor b = (Tensor::randn({E}, gen, DType::f32) * 0.1).requires_grad_();
  const Tensor y = layer_norm(x, {E}, w, b);
  EXPECT_FALSE(saves(y, "x"));
  EXPECT_TRUE(saves(y, "out"));
  EXPECT_EQ(own_saved_bytes(y), size_t(2 * R * 4));  // mean and rstd; y is the output itself
  // Fed into a Linear, y is what the Linear keeps anyway: the pair holds no [R, E] of x.
  const Tensor h = linear(y, randn_leaf({3, E}, 4, DType::f32));
  EXPECT_TRUE(saves(h, "x"));
  EXPECT_TRUE(h.grad_fn()->saved[0].value.shares_storage(y));
}

// A zero weight (or a bias far above the weight) could not give x̂ back: that
// call keeps x, and its gradients equal the input-saving ones.
TEST(MemoryLayerNorm, WeightThatCannotGiveXHatBackKeepsX) {
  const int64_t E = 4;
  for (const auto& [w_values, b_values] :
       {std::pair{std::vector<double>{1, 0, 2, 1}, std::vector<double>{0, 0, 0, 0}},
        std::pair{std::vector<double>{1, 0.01, 2, 1}, std::vector<double>{0, 1, 0, 0}}}) {
    std::vector<std::vector<double>> grads[2];
    for (int mode = 0; mode < 2; ++mode) {
      MemoryOptionsGuard guard(mode == 0 ? kLean : kFast);
      Tensor x = randn_leaf({3, E}, 5);
      Tensor w = Tensor::from_vector(w_values, {E}, DType::f64).requires_grad_();
      Tensor b = Tensor::from_vector(b_values, {E}, DType::f64).requires_grad_();
      Tensor y = layer_norm(x, {E}, w, b);
      EXPECT_TRUE(saves(y, "x"));
      EXPECT_FALSE(saves(y, "out"));
      sum(y * y).backward();
      grads[mode] = {grad_values(x), grad_values(w), grad_values(b)};
    }
    EXPECT_EQ(grads[0], grads[1]);
  }
}

TEST(MemoryLayerNorm, GradcheckAndGradgradcheckSavingTheOutput) {
  MemoryOptionsGuard guard(kLean);
  const int64_t E = 5;
  Generator gen(6);
  Tensor x = randn_leaf({3, E}, gen), w = (Tensor::randn({E}, gen, DType::f64) * 0.2 + 1.0).requires_grad_();
  Tensor b = (Tensor::randn({E}, gen, DType::f64) * 0.3).requires_grad_();
  const GradcheckFn fn = [E](const std::vector<Tensor>& in) { return layer_norm(in[0], {E}, in[1], in[2]); };
  ASSERT_TRUE(saves(fn({x, w, b}), "out"));
  expect_gradcheck(fn, {x, w, b});
  const GradcheckReport r = gradgradcheck(fn, {x, w, b});
  EXPECT_TRUE(r.ok) << r.summary();
}

// ---- a transformer step --------------------------------------------------------

struct StepRun {
  std::vector<std::vector<double>> grads;
  size_t held_after_forward = 0;  // allocator bytes the graph holds once the forward is done
};

StepRun run_step(const MemoryOptions& mem) {
  MemoryOptionsGuard guard(mem);
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 11;
  c.d_model = 16;
  c.heads = 4;
  c.d_ff = 32;
  c.enc_layers = c.dec_layers = 1;
  c.dropout = 0;
  Generator gen(2);
  Seq2SeqTransformer model(c, gen, nullptr);
  const int64_t B = 2, L = 6;
  std::vector<int64_t> src(B * L), tgt(B * L);
  for (int64_t i = 0; i < B * L; ++i) src[i] = 1 + i % 10, tgt[i] = 1 + (3 * i) % 10;
  const Tensor s = Tensor::from_vector(src, {B, L}), t = Tensor::from_vector(tgt, {B, L});
  StepRun run;
  const size_t before = default_allocator().bytes_in_use();
  {
    Tensor logits = model.forward(s, t);
    Tensor loss = cross_entropy(logits.reshape({B * L, c.tgt_vocab}), t.reshape({B * L}));
    logits = Tensor();
    run.held_after_forward = default_allocator().bytes_in_use() - before;
    loss.backward();
  }
  for (const Tensor& p : model.parameters()) run.grads.push_back(grad_values(p));
  return run;
}

// The lean choices keep the gradients of a whole model (to float rounding:
// layer norm's x̂ comes back from y) and hold fewer bytes between forward and
// backward: per attention P [B, H, T, S] less two numbers per row, per layer
// norm in a pre-LN stack its input x [B, L, E].
TEST(MemoryTransformer, LeanStepHasTheSameGradientsAndHoldsLess) {
  const StepRun lean = run_step(kLean), fast = run_step(kFast);
  ASSERT_EQ(lean.grads.size(), fast.grads.size());
  for (size_t i = 0; i < lean.grads.size(); ++i)
    for (size_t j = 0; j < lean.grads[i].size(); ++j)
      EXPECT_NEAR(lean.grads[i][j], fast.grads[i][j], 1e-5 * (1 + std::abs(fast.grads[i][j]))) << i << " " << j;
  const size_t B = 2, L = 6, E = 16, H = 4;
  const size_t attentions = 3, norms = 2 + 1 + 3 + 1;  // encoder layer + final, decoder layer + final
  const size_t p_bytes = B * H * L * L * 4, stats_bytes = B * H * L * 2 * 4, x_bytes = B * L * E * 4;
  EXPECT_EQ(fast.held_after_forward - lean.held_after_forward,
            attentions * (p_bytes - stats_bytes) + norms * x_bytes);
}

}  // namespace
