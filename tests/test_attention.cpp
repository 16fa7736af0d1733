// Scaled dot-product attention: the fused op against its composite twin
// (values and every gradient), gradchecks per mask kind, the masking
// properties (fully masked rows, causality), dropout, layouts, error paths.
#include <cmath>
#include <functional>
#include <optional>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/gradcheck.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/attention.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

using AttnFn = AttentionResult (*)(const Tensor&, const Tensor&, const Tensor&, const AttentionOptions&);
const AttnFn kFused = &scaled_dot_product_attention;
const AttnFn kComposite = &scaled_dot_product_attention_composite;

struct Sizes {
  int64_t B = 2, H = 2, T = 3, S = 4, D = 3, Dv = 2;
  std::optional<int64_t> G;  // K/V heads; H when unset
  int64_t kv() const { return G.value_or(H); }
};

// Bool mask with roughly `frac` of its entries true.
Tensor random_bool(const Shape& s, Generator& gen, double frac) {
  std::vector<bool> m(static_cast<size_t>(shape_numel(s)));
  for (size_t i = 0; i < m.size(); ++i) m[i] = gen.uniform() < frac;
  return Tensor::from_vector(m, s);
}

// Float additive mask: N(0, 1) biases, with -∞ at roughly `frac` of entries.
Tensor random_bias(const Shape& s, Generator& gen, DType dt, double frac) {
  std::vector<double> m(static_cast<size_t>(shape_numel(s)));
  for (auto& x : m) x = gen.uniform() < frac ? -INFINITY : gen.normal();
  return Tensor::from_vector(m, s, dt);
}

// Key padding: the last `pad[b]` keys of batch b are padding.
Tensor padding(int64_t B, int64_t S, const std::vector<int64_t>& pad) {
  std::vector<bool> m(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = S - pad[b]; s < S; ++s) m[b * S + s] = true;
  return Tensor::from_vector(m, {B, S});
}

struct Outcome {
  Tensor out, weights, dq, dk, dv, dmask;
};

// Forward, then backward of sum(out ⊙ g) for a fixed random g.
Outcome run(AttnFn fn, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, uint64_t gseed = 99) {
  AttentionResult r = fn(q, k, v, o);
  Generator gg(gseed);
  const Tensor g = Tensor::randn(r.out.shape(), gg, r.out.dtype());
  for (Tensor t : {q, k, v, o.attn_mask})
    if (t.defined() && t.is_leaf() && t.requires_grad()) t.zero_grad();
  if (r.out.requires_grad()) r.out.backward(g);
  auto grad_of = [](const Tensor& t) { return t.defined() && t.requires_grad() ? t.grad() : Tensor(); };
  return {r.out, r.weights, grad_of(q), grad_of(k), grad_of(v), grad_of(o.attn_mask)};
}

void expect_same(const Tensor& a, const Tensor& b, double rtol, double atol, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(a.defined(), b.defined());
  if (!a.defined()) return;
  EXPECT_TRUE(all_finite(a));
  expect_close(a, b, rtol, atol);
}

void expect_agree(const Outcome& f, const Outcome& c, double rtol, double atol) {
  expect_same(f.out, c.out, rtol, atol, "out");
  expect_same(f.weights, c.weights, rtol, atol, "weights");
  expect_same(f.dq, c.dq, rtol, atol, "dq");
  expect_same(f.dk, c.dk, rtol, atol, "dk");
  expect_same(f.dv, c.dv, rtol, atol, "dv");
  expect_same(f.dmask, c.dmask, rtol, atol, "dmask");
}

// The fused op and the composite on the same inputs agree in value and in the
// gradients of q, k, v (and of a float mask that requires grad).
void check_agreement(const Sizes& z, const std::function<void(AttentionOptions&, Generator&, DType)>& set_masks,
                     DType dt = DType::f64) {
  Generator gen(7);
  Tensor q = randn_leaf({z.B, z.H, z.T, z.D}, gen, dt), k = randn_leaf({z.B, z.kv(), z.S, z.D}, gen, dt);
  Tensor v = randn_leaf({z.B, z.kv(), z.S, z.Dv}, gen, dt);
  AttentionOptions o;
  o.need_weights = true;
  set_masks(o, gen, dt);
  const Outcome f = run(kFused, q, k, v, o), c = run(kComposite, q, k, v, o);
  EXPECT_EQ(f.out.grad_fn_name(), "scaled_dot_product_attention");
  const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
  expect_agree(f, c, tol, tol);
}

// gradcheck of q, k, v (and a learning float mask) through `fn`.
void check_grads(AttnFn fn, const Sizes& z, const std::function<void(AttentionOptions&, Generator&)>& set_masks) {
  Generator gen(11);
  const DType dt = DType::f64;
  Tensor q = randn_leaf({z.B, z.H, z.T, z.D}, gen, dt), k = randn_leaf({z.B, z.kv(), z.S, z.D}, gen, dt);
  Tensor v = randn_leaf({z.B, z.kv(), z.S, z.Dv}, gen, dt);
  AttentionOptions o;
  set_masks(o, gen);
  std::vector<Tensor> inputs{q, k, v};
  const bool mask_input = o.attn_mask.defined() && o.attn_mask.requires_grad();
  if (mask_input) inputs.push_back(o.attn_mask);
  auto r = gradcheck(
      [fn, o, mask_input](const std::vector<Tensor>& in) {
        AttentionOptions oo = o;
        if (mask_input) oo.attn_mask = in[3];
        return fn(in[0], in[1], in[2], oo).out;
      },
      inputs);
  EXPECT_TRUE(r.ok) << r.summary();
}

// Each mask kind, shared by the agreement tests and the gradchecks.
struct MaskKind {
  const char* name;
  Sizes sizes;
  std::function<void(AttentionOptions&, Generator&, DType)> set;
};

std::vector<MaskKind> mask_kinds() {
  const Sizes base;
  Sizes cross = base;
  cross.T = 2;
  cross.S = 5;  // cross-attention, S != T
  Sizes causal_long = base;
  causal_long.T = 5;
  causal_long.S = 3;  // causal with T > S: late rows see every key
  return {
      {"none", base, [](AttentionOptions&, Generator&, DType) {}},
      {"causal", base, [](AttentionOptions& o, Generator&, DType) { o.is_causal = true; }},
      {"causal T>S", causal_long, [](AttentionOptions& o, Generator&, DType) { o.is_causal = true; }},
      {"bool [T,S]", base, [](AttentionOptions& o, Generator& g, DType) { o.attn_mask = random_bool({3, 4}, g, 0.3); }},
      {"bool [B*H,T,S]", base,
       [](AttentionOptions& o, Generator& g, DType) { o.attn_mask = random_bool({4, 3, 4}, g, 0.3); }},
      {"float [T,S]", base,
       [](AttentionOptions& o, Generator& g, DType dt) { o.attn_mask = random_bias({3, 4}, g, dt, 0.2); }},
      {"float [B*H,T,S] learning", base,
       [](AttentionOptions& o, Generator& g, DType dt) {
         o.attn_mask = random_bias({4, 3, 4}, g, dt, 0.2).requires_grad_();
       }},
      {"float [T,S] learning", base,
       [](AttentionOptions& o, Generator& g, DType dt) { o.attn_mask = random_bias({3, 4}, g, dt, 0.0).requires_grad_(); }},
      {"key padding", base, [](AttentionOptions& o, Generator&, DType) { o.key_padding_mask = padding(2, 4, {1, 2}); }},
      {"causal + key padding", base,
       [](AttentionOptions& o, Generator&, DType) {
         o.is_causal = true;
         o.key_padding_mask = padding(2, 4, {0, 1});
       }},
      {"all masks + scale", base,
       [](AttentionOptions& o, Generator& g, DType) {
         o.is_causal = true;
         o.attn_mask = random_bool({4, 3, 4}, g, 0.2);
         o.key_padding_mask = padding(2, 4, {1, 0});
         o.scale = 0.7;
       }},
      {"cross S != T", cross, [](AttentionOptions& o, Generator&, DType) { o.key_padding_mask = padding(2, 5, {2, 0}); }},
  };
}

}  // namespace

// ---- fused vs composite -------------------------------------------------------

TEST(Attention, FusedMatchesCompositeEveryMaskKind) {
  for (const MaskKind& m : mask_kinds()) {
    SCOPED_TRACE(m.name);
    check_agreement(m.sizes, m.set);
    Sizes dv = m.sizes;
    dv.Dv = 5;  // Dv != D
    check_agreement(dv, m.set);
  }
}

TEST(Attention, FusedMatchesCompositeFloat32) {
  for (const MaskKind& m : mask_kinds()) {
    SCOPED_TRACE(m.name);
    check_agreement(m.sizes, m.set, DType::f32);
  }
}

TEST(Attention, FusedMatchesCompositeLarger) {
  Sizes z{2, 3, 17, 23, 8, 6};
  check_agreement(z, [](AttentionOptions& o, Generator& g, DType) {
    o.is_causal = true;
    o.key_padding_mask = random_bool({2, 23}, g, 0.2);
  }, DType::f32);
}

TEST(Attention, NaiveGemmBackendAgrees) {
  GemmBackendGuard naive(GemmBackend::naive);
  check_agreement(Sizes{}, [](AttentionOptions& o, Generator&, DType) { o.is_causal = true; });
}

// ---- gradcheck, f64, every mask kind, both ops ---------------------------------

TEST(Attention, GradcheckFusedEveryMaskKind) {
  for (const MaskKind& m : mask_kinds()) {
    SCOPED_TRACE(m.name);
    check_grads(kFused, m.sizes, [&](AttentionOptions& o, Generator& g) { m.set(o, g, DType::f64); });
  }
}

TEST(Attention, GradcheckCompositeEveryMaskKind) {
  for (const MaskKind& m : mask_kinds()) {
    SCOPED_TRACE(m.name);
    check_grads(kComposite, m.sizes, [&](AttentionOptions& o, Generator& g) { m.set(o, g, DType::f64); });
  }
}

// ---- grouped-query attention: k, v [B, G, S, ·] shared by H/G query heads ------

namespace {

// Mask kinds at H = 4 (so G ∈ {1, 2, 4} all divide H); per-head masks are [B·H, T, S].
std::vector<MaskKind> grouped_kinds(int64_t G) {
  Sizes base{2, 4, 3, 4, 3, 2, G};
  Sizes cross = base;
  cross.T = 2;
  cross.S = 5;
  return {
      {"none", base, [](AttentionOptions&, Generator&, DType) {}},
      {"causal + key padding", base,
       [](AttentionOptions& o, Generator&, DType) {
         o.is_causal = true;
         o.key_padding_mask = padding(2, 4, {0, 1});
       }},
      {"bool [T,S]", base, [](AttentionOptions& o, Generator& g, DType) { o.attn_mask = random_bool({3, 4}, g, 0.3); }},
      {"float [B*H,T,S] learning", base,
       [](AttentionOptions& o, Generator& g, DType dt) {
         o.attn_mask = random_bias({8, 3, 4}, g, dt, 0.2).requires_grad_();
       }},
      {"float [T,S] learning", base,
       [](AttentionOptions& o, Generator& g, DType dt) { o.attn_mask = random_bias({3, 4}, g, dt, 0.0).requires_grad_(); }},
      {"cross S != T", cross, [](AttentionOptions& o, Generator&, DType) { o.key_padding_mask = padding(2, 5, {2, 0}); }},
  };
}

}  // namespace

TEST(Attention, GroupedFusedMatchesComposite) {
  for (int64_t G : {1, 2, 4}) {
    for (const MaskKind& m : grouped_kinds(G)) {
      SCOPED_TRACE(fmt::format("G = {}, {}", G, m.name));
      check_agreement(m.sizes, m.set);
      check_agreement(m.sizes, m.set, DType::f32);
    }
  }
}

TEST(Attention, GroupedGradcheckFused) {
  for (int64_t G : {1, 2, 4}) {
    for (const MaskKind& m : grouped_kinds(G)) {
      SCOPED_TRACE(fmt::format("G = {}, {}", G, m.name));
      check_grads(kFused, m.sizes, [&](AttentionOptions& o, Generator& g) { m.set(o, g, DType::f64); });
    }
  }
}

TEST(Attention, GroupedGradcheckComposite) {
  Sizes z{2, 4, 3, 4, 3, 2, 2};
  check_grads(kComposite, z, [](AttentionOptions& o, Generator&) { o.is_causal = true; });
}

TEST(Attention, GroupedEqualsMultiHeadWithRepeatedHeads) {
  // G K/V heads, each repeated for its H/G query heads (torch.repeat_interleave
  // on dim 1), is multi-head attention; the gradient of a shared head is the
  // sum of the repeated heads' gradients.
  Generator gen(23);
  const int64_t B = 2, H = 6, G = 2, T = 3, S = 5, D = 4;
  Tensor q = randn_leaf({B, H, T, D}, gen, DType::f64);
  Tensor k = randn_leaf({B, G, S, D}, gen, DType::f64), v = randn_leaf({B, G, S, D}, gen, DType::f64);
  AttentionOptions o;
  o.is_causal = true;
  o.need_weights = true;
  const Outcome grouped = run(kFused, q, k, v, o);
  EXPECT_EQ(grouped.dk.shape(), (Shape{B, G, S, D}));
  EXPECT_EQ(grouped.weights.shape(), (Shape{B, H, T, S}));  // per query head
  std::vector<double> kr, vr;  // repeat_interleave by hand
  const auto kd = k.to_vector<double>(), vd = v.to_vector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S * D; ++i) {
        kr.push_back(kd[static_cast<size_t>((b * G + h / (H / G)) * S * D + i)]);
        vr.push_back(vd[static_cast<size_t>((b * G + h / (H / G)) * S * D + i)]);
      }
  Tensor k_rep = Tensor::from_vector(kr, {B, H, S, D}, DType::f64).requires_grad_();
  Tensor v_rep = Tensor::from_vector(vr, {B, H, S, D}, DType::f64).requires_grad_();
  q.zero_grad();
  const Outcome full = run(kFused, q, k_rep, v_rep, o);
  expect_close(grouped.out, full.out, 1e-12, 1e-12);
  expect_close(grouped.weights, full.weights, 1e-12, 1e-12);
  expect_close(grouped.dq, full.dq, 1e-12, 1e-12);
  const Tensor dk_summed = sum(full.dk.reshape({B, G, H / G, S, D}), {2});
  const Tensor dv_summed = sum(full.dv.reshape({B, G, H / G, S, D}), {2});
  expect_close(grouped.dk, dk_summed, 1e-12, 1e-12);
  expect_close(grouped.dv, dv_summed, 1e-12, 1e-12);
}

TEST(Attention, GroupedDropoutMatchesComposite) {
  Generator gen(29);
  Tensor q = randn_leaf({2, 4, 4, 3}, gen, DType::f64), k = randn_leaf({2, 2, 5, 3}, gen, DType::f64);
  Tensor v = randn_leaf({2, 2, 5, 2}, gen, DType::f64);
  auto with_seed = [&](AttnFn fn) {
    Generator g(42);
    AttentionOptions o;
    o.dropout_p = 0.3;
    o.need_weights = true;
    o.generator = &g;
    return run(fn, q, k, v, o);
  };
  expect_agree(with_seed(kFused), with_seed(kComposite), 1e-12, 1e-12);
}

TEST(Attention, GroupedAcrossThreadsMatchesOneThread) {
  Generator gen(31);
  Tensor q = randn_leaf({3, 8, 9, 4}, gen, DType::f64), k = randn_leaf({3, 2, 11, 4}, gen, DType::f64);
  Tensor v = randn_leaf({3, 2, 11, 5}, gen, DType::f64);
  AttentionOptions o;
  o.key_padding_mask = random_bool({3, 11}, gen, 0.2);
  const int before = num_threads();
  set_num_threads(1);
  const Outcome one = run(kFused, q, k, v, o);
  set_num_threads(2);
  const Outcome two = run(kFused, q, k, v, o);
  set_num_threads(before);
  expect_agree(one, two, 0, 0);  // bit for bit: a group's heads add into dK, dV on one thread, in order
}

TEST(Attention, GroupedErrorsNameTheOpAndTheHeads) {
  Generator gen(37);
  const Tensor q = Tensor::randn({2, 4, 3, 2}, gen), k = Tensor::randn({2, 3, 5, 2}, gen);
  for (const auto& [name, msg] :
       {std::pair{"scaled_dot_product_attention", error_message<ShapeError>([&] { scaled_dot_product_attention(q, k, k); })},
        std::pair{"scaled_dot_product_attention_composite",
                  error_message<ShapeError>([&] { scaled_dot_product_attention_composite(q, k, k); })}}) {
    for (const char* part : {name, "G = 3", "H = 4", "[2, 3, 5, 2]", "[2, 4, 3, 2]"})
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing in: " << msg;
  }
  // k and v must have the same number of K/V heads
  const std::string kv = error_message<ShapeError>(
      [&] { scaled_dot_product_attention(q, Tensor::randn({2, 2, 5, 2}, gen), Tensor::randn({2, 1, 5, 2}, gen)); });
  EXPECT_NE(kv.find("[2, 1, 5, 2]"), std::string::npos) << kv;
}

// ---- hand-computed values ------------------------------------------------------

TEST(Attention, HandComputedValueAndGradients) {
  // One query, two keys, D = 1, scale 1: scores [0, ln 3] -> P = [1/4, 3/4];
  // out = 1/4·4 + 3/4·8 = 7.   dV = Pᵀ·1 = [1/4, 3/4];
  // dP = v = [4, 8], rowsum(dP ⊙ P) = 7, dS = P ⊙ (dP − 7) = [-3/4, 3/4];
  // dQ = dS·K = 3/4·ln 3;  dK = dSᵀ Q = [-3/4, 3/4].
  for (AttnFn fn : {kFused, kComposite}) {
    Tensor q = Tensor::from_list({1.0}, {1, 1, 1, 1}, DType::f64).requires_grad_();
    Tensor k = Tensor::from_list({0.0, std::log(3.0)}, {1, 1, 2, 1}, DType::f64).requires_grad_();
    Tensor v = Tensor::from_list({4.0, 8.0}, {1, 1, 2, 1}, DType::f64).requires_grad_();
    AttentionOptions o;
    o.scale = 1.0;
    o.need_weights = true;
    AttentionResult r = fn(q, k, v, o);
    EXPECT_NEAR(r.out.item(), 7.0, 1e-12);
    expect_close(r.weights, Tensor::from_list({0.25, 0.75}, {1, 1, 1, 2}, DType::f64), 1e-12, 1e-12);
    EXPECT_FALSE(r.weights.requires_grad());
    r.out.backward(Tensor::ones({1, 1, 1, 1}, DType::f64));
    expect_close(v.grad(), Tensor::from_list({0.25, 0.75}, {1, 1, 2, 1}, DType::f64), 1e-12, 1e-12);
    expect_close(k.grad(), Tensor::from_list({-0.75, 0.75}, {1, 1, 2, 1}, DType::f64), 1e-12, 1e-12);
    EXPECT_NEAR(q.grad().item(), 0.75 * std::log(3.0), 1e-12);
  }
}

TEST(Attention, DefaultScaleIsInverseSqrtD) {
  Generator gen(3);
  Tensor q = Tensor::randn({1, 2, 3, 4}, gen), k = Tensor::randn({1, 2, 5, 4}, gen), v = Tensor::randn({1, 2, 5, 2}, gen);
  AttentionOptions half;
  half.scale = 0.5;  // 1/√4
  expect_close(scaled_dot_product_attention(q, k, v).out, scaled_dot_product_attention(q, k, v, half).out, 0, 0);
  AttentionOptions other;
  other.scale = 2.0;
  EXPECT_NE(scaled_dot_product_attention(q, k, v).out.to_vector<float>(),
            scaled_dot_product_attention(q, k, v, other).out.to_vector<float>());
}

// ---- masking properties ----------------------------------------------------------

TEST(Attention, FullyMaskedRowGivesZerosAndZeroGradient) {
  for (AttnFn fn : {kFused, kComposite}) {
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(kind);
      Generator gen(5);
      Tensor q = randn_leaf({2, 2, 3, 3}, gen, DType::f64), k = randn_leaf({2, 2, 4, 3}, gen, DType::f64);
      Tensor v = randn_leaf({2, 2, 4, 2}, gen, DType::f64);
      AttentionOptions o;
      o.need_weights = true;
      std::vector<bool> row1(12, false);
      for (int s = 0; s < 4; ++s) row1[4 + s] = true;  // query t = 1 sees nothing
      std::vector<double> bias(12, 0.0);
      for (int s = 0; s < 4; ++s) bias[4 + s] = -INFINITY;
      if (kind == 0) o.attn_mask = Tensor::from_vector(row1, {3, 4});
      if (kind == 1) o.attn_mask = Tensor::from_vector(bias, {3, 4}, DType::f64).requires_grad_();
      if (kind == 2) o.key_padding_mask = padding(2, 4, {4, 0});  // batch 0: every key is padding
      // Under anomaly mode any non-finite output or gradient throws. (Only the
      // fused op: the composite's masked scores are legitimately -∞.)
      std::optional<AnomalyGuard> anomaly;
      if (fn == kFused) anomaly.emplace();
      const Outcome r = run(fn, q, k, v, o);
      for (const Tensor& t : {r.out, r.weights, r.dq, r.dk, r.dv}) EXPECT_TRUE(all_finite(t));
      const auto out = r.out.to_vector<double>(), w = r.weights.to_vector<double>();
      const auto dq = r.dq.to_vector<double>();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t t = 0; t < 3; ++t) {
            const bool dead = kind == 2 ? b == 0 : t == 1;
            if (!dead) continue;
            for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(out[((b * 2 + h) * 3 + t) * 2 + j], 0.0);
            for (int64_t s = 0; s < 4; ++s) EXPECT_EQ(w[((b * 2 + h) * 3 + t) * 4 + s], 0.0);
            for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(dq[((b * 2 + h) * 3 + t) * 3 + j], 0.0);
          }
      if (kind == 2) {  // batch 0 passes nothing to its keys and values either
        const auto dk = r.dk.to_vector<double>(), dv = r.dv.to_vector<double>();
        for (size_t i = 0; i < dk.size() / 2; ++i) EXPECT_EQ(dk[i], 0.0);
        for (size_t i = 0; i < dv.size() / 2; ++i) EXPECT_EQ(dv[i], 0.0);
      }
      if (kind == 1) {  // the float mask's gradient is exactly 0 at its -∞ entries
        const auto dm = r.dmask.to_vector<double>();
        for (int s = 0; s < 4; ++s) EXPECT_EQ(dm[4 + s], 0.0);
      }
    }
  }
}

TEST(Attention, MaskedPositionsGetExactlyZeroWeightAndScoreGradient) {
  // A learning float mask sees dS directly: it must be exactly 0 wherever a
  // bool mask, padding or causality removed the key.
  Generator gen(8);
  Tensor q = randn_leaf({2, 2, 4, 3}, gen, DType::f64), k = randn_leaf({2, 2, 4, 3}, gen, DType::f64);
  Tensor v = randn_leaf({2, 2, 4, 2}, gen, DType::f64);
  AttentionOptions o;
  o.need_weights = true;
  o.is_causal = true;
  o.key_padding_mask = padding(2, 4, {1, 0});
  o.attn_mask = Tensor::zeros({4, 4}, DType::f64).requires_grad_();
  const Outcome r = run(kFused, q, k, v, o);
  const auto w = r.weights.to_vector<double>(), dm = r.dmask.to_vector<double>();
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t s = 0; s < 4; ++s) {
      if (s > t) {
        EXPECT_EQ(dm[t * 4 + s], 0.0);
        for (int64_t bh = 0; bh < 4; ++bh) EXPECT_EQ(w[(bh * 4 + t) * 4 + s], 0.0);
      }
      if (s == 3) {
        for (int64_t h = 0; h < 2; ++h) EXPECT_EQ(w[(h * 4 + t) * 4 + s], 0.0);  // batch 0 pads key 3
      }
    }
}

TEST(Attention, CausalOutputIgnoresFutureKeysAndValues) {
  for (AttnFn fn : {kFused, kComposite}) {
    Generator gen(9);
    const int64_t T = 5;
    Tensor q = Tensor::randn({2, 2, T, 3}, gen), k = Tensor::randn({2, 2, T, 3}, gen), v = Tensor::randn({2, 2, T, 4}, gen);
    AttentionOptions o;
    o.is_causal = true;
    o.need_weights = true;
    const AttentionResult a = fn(q, k, v, o);
    // Change keys and values at position 3: rows t < 3 must not move at all.
    Tensor k2 = k.clone(), v2 = v.clone();
    k2.narrow(2, 3, 1).copy_(Tensor::randn({2, 2, 1, 3}, gen));
    v2.narrow(2, 3, 1).copy_(Tensor::randn({2, 2, 1, 4}, gen));
    const AttentionResult b = fn(q, k2, v2, o);
    EXPECT_EQ(a.out.narrow(2, 0, 3).to_vector<float>(), b.out.narrow(2, 0, 3).to_vector<float>());
    EXPECT_NE(a.out.narrow(2, 3, 2).to_vector<float>(), b.out.narrow(2, 3, 2).to_vector<float>());
    const auto w = a.weights.to_vector<float>();
    for (int64_t bh = 0; bh < 4; ++bh)
      for (int64_t t = 0; t < T; ++t) {
        float total = 0;
        for (int64_t s = 0; s < T; ++s) {
          if (s > t) {
            EXPECT_EQ(w[(bh * T + t) * T + s], 0.0f);
          }
          total += w[(bh * T + t) * T + s];
        }
        EXPECT_NEAR(total, 1.0f, 1e-6f);
      }
  }
}

TEST(Attention, BoolMaskEqualsMinusInfinityFloatMask) {
  Generator gen(10);
  Tensor q = Tensor::randn({1, 2, 3, 4}, gen), k = Tensor::randn({1, 2, 4, 4}, gen), v = Tensor::randn({1, 2, 4, 2}, gen);
  const Tensor bm = random_bool({3, 4}, gen, 0.4);
  AttentionOptions ob, of;
  ob.attn_mask = bm;
  of.attn_mask = masked_fill(Tensor::zeros({3, 4}), bm, -INFINITY);
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, ob).out.to_vector<float>(),
            scaled_dot_product_attention(q, k, v, of).out.to_vector<float>());
}

// ---- layouts: strided views go to GEMM without copies (or are copied once) -----

TEST(Attention, NonContiguousInputsMatchContiguous) {
  Generator gen(12);
  const int64_t B = 2, H = 3, T = 4, S = 5, D = 2, Dv = 3;
  // q: [B, T, H, D] projection split into heads -> [B, H, T, D], row stride H·D
  Tensor q = Tensor::randn({B, T, H, D}, gen, DType::f64).transpose(1, 2).detach().requires_grad_();
  // k: column-major heads, a transposed [B, H, D, S]
  Tensor k = Tensor::randn({B, H, D, S}, gen, DType::f64).transpose(2, 3).detach().requires_grad_();
  // v: every other column of a wider tensor: neither layout, copied once
  Tensor v = Tensor::randn({B, H, S, 2 * Dv}, gen, DType::f64).slice(3, 0, 2 * Dv, 2).detach().requires_grad_();
  ASSERT_FALSE(q.is_contiguous());
  ASSERT_FALSE(k.is_contiguous());
  ASSERT_FALSE(v.is_contiguous());
  AttentionOptions o;
  o.is_causal = true;
  o.need_weights = true;
  const Outcome f = run(kFused, q, k, v, o);
  Tensor qc = q.contiguous().detach().requires_grad_(), kc = k.contiguous().detach().requires_grad_();
  Tensor vc = v.contiguous().detach().requires_grad_();
  const Outcome c = run(kFused, qc, kc, vc, o);
  expect_agree(f, c, 1e-12, 1e-12);
  expect_agree(f, run(kComposite, q, k, v, o), 1e-12, 1e-12);
  auto r = gradcheck([&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], o).out; },
                     {q, k, v});
  EXPECT_TRUE(r.ok) << r.summary();
}

// The gradients the fused op sends to its inputs (watched as they leave the
// node: a leaf's .grad is its own contiguous copy).
struct SentGradients : BackwardObserver {
  std::vector<Tensor> sent;
  void before(const Node&, const Tensor&) override {}
  void after(const Node& node, const Tensor&, const std::vector<Tensor>& input_grads) override {
    if (node.name == "scaled_dot_product_attention") sent = input_grads;
  }
};

// dQ, dK, dV leave the op laid out like split-heads inputs ([B, T, H, D] data
// viewed as [B, H, T, D]), so the head split's transpose and reshape pass
// them on as views; contiguous inputs get contiguous gradients. The values
// are those the contiguous inputs get.
TEST(Attention, GradientsTakeTheSplitHeadsLayoutOfTheirInputs) {
  Generator gen(14);
  const int64_t B = 2, H = 4, G = 2, T = 5, S = 6, D = 3;
  Tensor q = Tensor::randn({B, T, H, D}, gen, DType::f64).transpose(1, 2).detach().requires_grad_();
  Tensor k = Tensor::randn({B, S, G, D}, gen, DType::f64).transpose(1, 2).detach().requires_grad_();
  Tensor v = Tensor::randn({B, S, G, D}, gen, DType::f64).transpose(1, 2).detach().requires_grad_();
  AttentionOptions o;
  o.is_causal = true;
  SentGradients split;
  Outcome f;
  {
    BackwardObserverGuard watch(&split);
    f = run(kFused, q, k, v, o);
  }
  ASSERT_EQ(split.sent.size(), 4u);
  EXPECT_EQ(split.sent[0].strides(), q.strides());
  EXPECT_EQ(split.sent[1].strides(), k.strides());
  EXPECT_EQ(split.sent[2].strides(), v.strides());
  Tensor qc = q.contiguous().detach().requires_grad_(), kc = k.contiguous().detach().requires_grad_();
  Tensor vc = v.contiguous().detach().requires_grad_();
  SentGradients contiguous;
  Outcome c;
  {
    BackwardObserverGuard watch(&contiguous);
    c = run(kFused, qc, kc, vc, o);
  }
  ASSERT_EQ(contiguous.sent.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(contiguous.sent[i].is_contiguous()) << "input " << i;
  expect_agree(f, c, 0, 0);
}

TEST(Attention, ExpandedAndCacheViewsMatchComposite) {
  Generator gen(13);
  // k, v shared by every head (stride 0 on H), and a KV cache: rows [0, S) of
  // a [B, H, capacity, D] buffer.
  Tensor k1 = randn_leaf({2, 1, 4, 3}, gen, DType::f64);
  Tensor cache = randn_leaf({2, 2, 7, 2}, gen, DType::f64);
  Tensor q = randn_leaf({2, 2, 3, 3}, gen, DType::f64);
  auto go = [&](AttnFn fn) {
    for (Tensor t : {q, k1, cache}) t.zero_grad();
    AttentionResult r = fn(q, k1.expand({2, 2, 4, 3}), cache.narrow(2, 0, 4), {});
    sum(r.out * r.out).backward();
    return std::vector<Tensor>{r.out, q.grad(), k1.grad(), cache.grad()};
  };
  const auto f = go(kFused), c = go(kComposite);
  for (size_t i = 0; i < f.size(); ++i) expect_close(f[i], c[i], 1e-12, 1e-12);
}

// ---- only the needed gradients ---------------------------------------------------

TEST(Attention, ComputesOnlyRequestedGradients) {
  Generator gen(14);
  Tensor q = randn_leaf({1, 2, 3, 2}, gen, DType::f64);
  Tensor k = Tensor::randn({1, 2, 3, 2}, gen, DType::f64), v = Tensor::randn({1, 2, 3, 2}, gen, DType::f64);
  const Outcome f = run(kFused, q, k, v, {}), c = run(kComposite, q, k, v, {});
  expect_close(f.dq, c.dq, 1e-12, 1e-12);
  EXPECT_FALSE(f.dk.defined());
  EXPECT_FALSE(f.dv.defined());
  // Only v: the softmax gradient path is skipped, dV still right.
  Tensor q2 = q.detach(), v2 = v.detach().requires_grad_();
  expect_close(run(kFused, q2, k, v2, {}).dv, run(kComposite, q2, k, v2, {}).dv, 1e-12, 1e-12);
  // Without any input needing grad, no graph node.
  NoGradGuard no_grad;
  EXPECT_FALSE(scaled_dot_product_attention(q, k, v).out.requires_grad());
}

// ---- dropout -----------------------------------------------------------------------

TEST(Attention, DropoutSameSeedSameResultAndMatchesComposite) {
  Generator gen(15);
  Tensor q = randn_leaf({2, 2, 4, 3}, gen, DType::f64), k = randn_leaf({2, 2, 5, 3}, gen, DType::f64);
  Tensor v = randn_leaf({2, 2, 5, 2}, gen, DType::f64);
  AttentionOptions o;
  o.dropout_p = 0.4;
  o.need_weights = true;
  o.key_padding_mask = padding(2, 5, {1, 0});
  auto with_seed = [&](AttnFn fn, uint64_t seed) {
    Generator g(seed);
    AttentionOptions oo = o;
    oo.generator = &g;
    return run(fn, q, k, v, oo);
  };
  const Outcome a = with_seed(kFused, 42), b = with_seed(kFused, 42), c = with_seed(kComposite, 42);
  expect_agree(a, b, 0, 0);       // bit for bit
  expect_agree(a, c, 1e-12, 1e-12);  // the composite's dropout() draws the same mask
  EXPECT_NE(a.out.to_vector<double>(), with_seed(kFused, 43).out.to_vector<double>());

  // Each returned weight is 0 (dropped) or P / (1 − p) (kept), P the softmax.
  AttentionOptions plain = o;
  plain.dropout_p = 0;
  const auto p = scaled_dot_product_attention(q, k, v, plain).weights.to_vector<double>();
  const auto w = a.weights.to_vector<double>();
  int dropped = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0 && p[i] != 0) ++dropped;
    else EXPECT_NEAR(w[i], p[i] / 0.6, 1e-12);
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, static_cast<int>(w.size()));
}

TEST(Attention, DropoutGradcheckWithFixedSeed) {
  // Reseeding inside fn gives every evaluation the same mask, so the op is a
  // fixed differentiable function and gradcheck applies.
  Generator gen(16);
  Tensor q = randn_leaf({1, 2, 3, 2}, gen, DType::f64), k = randn_leaf({1, 2, 4, 2}, gen, DType::f64);
  Tensor v = randn_leaf({1, 2, 4, 3}, gen, DType::f64);
  for (AttnFn fn : {kFused, kComposite}) {
    auto r = gradcheck(
        [fn](const std::vector<Tensor>& in) {
          Generator g(77);
          AttentionOptions o;
          o.dropout_p = 0.3;
          o.generator = &g;
          o.is_causal = true;
          return fn(in[0], in[1], in[2], o).out;
        },
        {q, k, v});
    EXPECT_TRUE(r.ok) << r.summary();
  }
}

TEST(Attention, DropoutZeroEqualsNoDropoutAndOneGivesZeros) {
  Generator gen(17);
  Tensor q = randn_leaf({1, 2, 3, 2}, gen, DType::f64), k = randn_leaf({1, 2, 4, 2}, gen, DType::f64);
  Tensor v = randn_leaf({1, 2, 4, 3}, gen, DType::f64);
  Generator g(1);
  const Generator::State before = g.state();
  AttentionOptions zero;
  zero.generator = &g;
  const Outcome a = run(kFused, q, k, v, zero), b = run(kFused, q, k, v, {});
  expect_agree(a, b, 0, 0);
  EXPECT_EQ(g.state(), before);  // p = 0 draws nothing
  AttentionOptions one;
  one.dropout_p = 1.0;
  one.generator = &g;
  const Outcome c = run(kFused, q, k, v, one);
  for (double x : c.out.to_vector<double>()) EXPECT_EQ(x, 0.0);
  for (double x : c.dq.to_vector<double>()) EXPECT_EQ(x, 0.0);
}

// ---- need_weights ------------------------------------------------------------------

TEST(Attention, WeightsAreDetachedCopiesOfTheSoftmax) {
  Generator gen(18);
  Tensor q = randn_leaf({2, 3, 4, 2}, gen, DType::f64), k = randn_leaf({2, 3, 5, 2}, gen, DType::f64);
  Tensor v = randn_leaf({2, 3, 5, 2}, gen, DType::f64);
  AttentionOptions o;
  EXPECT_FALSE(scaled_dot_product_attention(q, k, v, o).weights.defined());
  o.need_weights = true;
  AttentionResult r = scaled_dot_product_attention(q, k, v, o);
  ASSERT_EQ(r.weights.shape(), (Shape{2, 3, 4, 5}));
  EXPECT_FALSE(r.weights.requires_grad());
  expect_close(sum(r.weights, {-1}), Tensor::ones({2, 3, 4}, DType::f64), 1e-12, 1e-12);
  // Scribbling on the returned weights must not change the gradients.
  const Tensor clean_dq = run(kFused, q, k, v, o).dq.clone();
  q.zero_grad();
  r.weights.fill_(123.0);
  Generator gg(99);
  r.out.backward(Tensor::randn(r.out.shape(), gg, DType::f64));
  expect_close(q.grad(), clean_dq, 0, 0);
}

// ---- errors ---------------------------------------------------------------------------

TEST(Attention, ErrorsNameTheOpAndShapes) {
  Generator gen(19);
  const Tensor q = Tensor::randn({2, 2, 3, 4}, gen), k = Tensor::randn({2, 2, 5, 4}, gen);
  const Tensor v = Tensor::randn({2, 2, 5, 6}, gen);
  auto shape_err = [&](const Tensor& a, const Tensor& b, const Tensor& c, const AttentionOptions& o = {}) {
    return error_message<ShapeError>([&] { scaled_dot_product_attention(a, b, c, o); });
  };
  auto has = [](const std::string& msg, std::initializer_list<const char*> parts) {
    EXPECT_NE(msg.find("scaled_dot_product_attention"), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing in: " << msg;
  };
  has(shape_err(Tensor::randn({2, 3, 4}, gen), k, v), {"rank-4", "[2, 3, 4]"});
  has(shape_err(q, Tensor::randn({2, 2, 5, 3}, gen), v), {"head width D", "[2, 2, 3, 4]", "[2, 2, 5, 3]"});
  has(shape_err(q, k, Tensor::randn({2, 2, 4, 6}, gen)), {"key length S", "[2, 2, 4, 6]"});
  has(shape_err(q, Tensor::randn({1, 2, 5, 4}, gen), v), {"batch B or heads H", "[1, 2, 5, 4]"});
  has(shape_err(q, k, Tensor::randn({2, 3, 5, 6}, gen)), {"batch B or heads H", "[2, 3, 5, 6]"});

  AttentionOptions o;
  o.attn_mask = Tensor::zeros({5, 3}, DType::b8);
  has(shape_err(q, k, v, o), {"attn_mask", "[3, 5]", "[4, 3, 5]", "[5, 3]"});
  o.attn_mask = Tensor::zeros({2, 3, 5}, DType::b8);
  has(shape_err(q, k, v, o), {"attn_mask", "[2, 3, 5]"});
  o.attn_mask = Tensor::zeros({3, 5}, DType::i64);
  has(error_message<DTypeError>([&] { scaled_dot_product_attention(q, k, v, o); }), {"attn_mask", "i64"});
  o.attn_mask = Tensor::zeros({3, 5}, DType::f64);  // q is f32
  has(error_message<DTypeError>([&] { scaled_dot_product_attention(q, k, v, o); }), {"attn_mask", "f64"});

  AttentionOptions p;
  p.key_padding_mask = Tensor::zeros({2, 4}, DType::b8);
  has(shape_err(q, k, v, p), {"key_padding_mask", "[2, 5]", "[2, 4]"});
  p.key_padding_mask = Tensor::zeros({2, 5});
  has(error_message<DTypeError>([&] { scaled_dot_product_attention(q, k, v, p); }), {"key_padding_mask", "b8"});

  has(error_message<DTypeError>([&] { scaled_dot_product_attention(q, k.to(DType::f64), v); }), {"f32", "f64"});
  has(error_message<DTypeError>([&] {
        scaled_dot_product_attention(Tensor::zeros({1, 1, 1, 1}, DType::i64), Tensor::zeros({1, 1, 1, 1}, DType::i64),
                                     Tensor::zeros({1, 1, 1, 1}, DType::i64));
      }),
      {"floating"});

  AttentionOptions d;
  d.dropout_p = 0.1;
  has(error_message<ValueError>([&] { scaled_dot_product_attention(q, k, v, d); }), {"Generator"});
  Generator g(1);
  d.generator = &g;
  d.dropout_p = 1.5;
  has(error_message<ValueError>([&] { scaled_dot_product_attention(q, k, v, d); }), {"dropout_p", "1.5"});
  // The composite checks the same rules under its own name.
  EXPECT_NE(error_message<ShapeError>([&] { scaled_dot_product_attention_composite(q, k, Tensor::randn({2, 2, 4, 6}, gen)); })
                .find("scaled_dot_product_attention_composite"),
            std::string::npos);
}
