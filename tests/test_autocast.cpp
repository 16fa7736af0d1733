// bf16 autocast (autocast.h): the guard's scope, the mixed products of linear
// and matmul against a double reference on bf16-rounded operands (forward and
// every gradient), what backward keeps, f64 left alone, the decision kept by
// the closure, create_graph, and gemm_bf16's kernels against each other.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <attograd/autograd/autocast.h>
#include <attograd/autograd/autograd.h>
#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/backend/small_gemm.h>
#include <attograd/autograd/settings.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_gradcheck;
using attograd::testing::expect_near_all;

namespace {

// t's values rounded to bf16 (the conversion test_bf16 checks bit for bit), as doubles.
std::vector<double> rounded(const Tensor& t) { return t.detach().to(DType::bf16).to_vector<double>(); }

// out [M, N] = a [M, K] · b [K, N] in double, row-major.
std::vector<double> mm(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> out(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) out[i * N + j] += a[i * K + k] * b[k * N + j];
  return out;
}

// a [R, C] transposed.
std::vector<double> tr(const std::vector<double>& a, int64_t R, int64_t C) {
  std::vector<double> out(a.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[c * R + r] = a[r * C + c];
  return out;
}

// Largest |x| of a vector, so a tolerance can be relative to the scale of a result.
double scale_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// f32 values with bits below bf16's 8 significant bits, so rounding them shows.
Tensor fine_f32(const Shape& s, uint64_t seed) {
  return (attograd::testing::randn(s, seed, DType::f64) + 0.001).to(DType::f32);
}

}  // namespace

TEST(Autocast, GuardScopesThePrecisionPerThread) {
  EXPECT_EQ(AutocastMode::get(), Precision::f32);
  EXPECT_FALSE(autocast_to_bf16(DType::f32));
  {
    AutocastGuard on;
    EXPECT_TRUE(autocast_to_bf16(DType::f32));
    EXPECT_FALSE(autocast_to_bf16(DType::f64));  // f64 is never autocast
    {
      AutocastGuard off(Precision::f32);
      EXPECT_FALSE(autocast_to_bf16(DType::f32));
    }
    EXPECT_TRUE(autocast_to_bf16(DType::f32));
    bool other_thread = true;
    std::thread([&] { other_thread = autocast_to_bf16(DType::f32); }).join();
    EXPECT_FALSE(other_thread);  // a thread starts at f32 whatever another set
  }
  EXPECT_EQ(AutocastMode::get(), Precision::f32);
}

// Forward: x and w rounded, products summed in f32 (the reference sums the
// same rounded values in double: they differ by f32 summation error only);
// the bias is added unrounded. Backward: dx = round(grad) · round(w),
// dw = round(grad)ᵀ · round(x), and db = Σ grad unrounded.
TEST(Autocast, LinearIsTheProductOfRoundedOperands) {
  const int64_t R = 37, I = 70, O = 29;
  Tensor x = fine_f32({R, I}, 1).requires_grad_();
  Tensor w = fine_f32({O, I}, 2).requires_grad_();
  Tensor b = fine_f32({O}, 3).requires_grad_();
  const Tensor up = fine_f32({R, O}, 4);  // the upstream gradient
  Tensor y;
  {
    AutocastGuard bf16;
    y = linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  std::vector<double> want = mm(rounded(x), tr(rounded(w), O, I), R, I, O);
  const std::vector<double> bias = b.to_vector<double>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) want[r * O + o] += bias[o];
  expect_near_all(y.to_vector<double>(), want, 2e-6 * scale_of(want));
  // ... and not the f32 product: rounding moved it by far more than the sums' error.
  const std::vector<double> exact = linear(x.detach(), w.detach(), b.detach()).to_vector<double>();
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::fabs(exact[i] - want[i]));
  EXPECT_GT(moved, 1e-3 * scale_of(want));

  y.backward(up);  // outside the guard: the closure kept the forward's decision
  const std::vector<double> g = rounded(up);
  expect_near_all(x.grad().to_vector<double>(), mm(g, rounded(w), R, O, I), 2e-6 * scale_of(mm(g, rounded(w), R, O, I)));
  const std::vector<double> dw = mm(tr(g, R, O), rounded(x), O, R, I);
  expect_near_all(w.grad().to_vector<double>(), dw, 2e-6 * scale_of(dw));
  std::vector<double> db(static_cast<size_t>(O), 0.0);
  const std::vector<double> upv = up.to_vector<double>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < O; ++o) db[o] += upv[r * O + o];
  expect_near_all(b.grad().to_vector<double>(), db, 1e-5);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

// What the node keeps: the activation's bf16 copy (half the bytes of f32),
// and the weight itself, not a copy (it outlives the step anyway).
TEST(Autocast, BackwardKeepsTheBf16Copies) {
  Tensor x = fine_f32({8, 16}, 5).requires_grad_();
  Tensor w = fine_f32({4, 16}, 6).requires_grad_();
  AutocastGuard bf16;
  const Tensor y = linear(x, w, Tensor());
  const auto& saved = y.grad_fn()->saved;
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].name, "x");
  EXPECT_EQ(saved[0].value.dtype(), DType::bf16);
  EXPECT_EQ(saved_bytes(saved[0]), static_cast<size_t>(x.numel()) * 2);
  EXPECT_EQ(saved[1].name, "w");
  EXPECT_EQ(saved[1].value.dtype(), DType::f32);
  EXPECT_EQ(saved[1].value.data<float>(), w.data<float>()) << "the weight's own storage, not a copy";
  const Tensor z = matmul(x, w.transpose(0, 1));
  for (const SavedTensor& s : z.grad_fn()->saved) EXPECT_EQ(s.value.dtype(), DType::bf16) << s.name;
}

// GELU under autocast: the forward is the f32 one, backward keeps x rounded
// to bf16 (half the bytes) and its gradient is the slope at the rounded x.
TEST(Autocast, GeluKeepsItsInputInBf16AndTakesTheSlopeThere) {
  const int64_t n = 257;
  Tensor x = fine_f32({n}, 21).requires_grad_();
  const Tensor up = fine_f32({n}, 22);
  for (GeluApprox approx : {GeluApprox::none, GeluApprox::tanh}) {
    x.zero_grad();
    Tensor y;
    {
      AutocastGuard bf16;
      y = gelu(x, approx);
    }
    const SavedTensor& kept = y.grad_fn()->saved.at(0);
    EXPECT_EQ(kept.value.dtype(), DType::bf16);
    EXPECT_EQ(saved_bytes(kept), static_cast<size_t>(n) * 2);
    EXPECT_EQ(y.to_vector<float>(), gelu(x.detach(), approx).to_vector<float>()) << "the forward is f32's";
    y.backward(up);
    // The f32 backward at the rounded x (no autocast): the same kernel on the same values.
    Tensor xr = x.detach().to(DType::bf16).to(DType::f32).requires_grad_();
    gelu(xr, approx).backward(up);
    const Tensor plain = x.grad();
    EXPECT_EQ(plain.to_vector<float>(), xr.grad().to_vector<float>());
    // create_graph takes the same slope (and its graph reaches x).
    x.zero_grad();
    {
      AutocastGuard bf16;
      y = gelu(x, approx);
    }
    const Tensor g1 = grad({y}, {x}, {up}, GradOptions{.create_graph = true}).at(0);
    EXPECT_TRUE(g1.requires_grad());
    expect_near_all(g1.to_vector<double>(), xr.grad().to_vector<double>(),
                    1e-6 * scale_of(xr.grad().to_vector<double>()));
    // And within bf16's rounding of the exact-input gradient.
    Tensor xf = x.detach().requires_grad_();
    gelu(xf, approx).backward(up);
    expect_near_all(plain.to_vector<double>(), xf.grad().to_vector<double>(),
                    1e-2 * scale_of(xf.grad().to_vector<double>()));
  }
}

// Batched and broadcast matmul: every batch's product of rounded operands,
// and db summed over the batch b was broadcast along.
TEST(Autocast, BatchedMatmulIsTheProductOfRoundedOperands) {
  const int64_t B = 3, M = 5, K = 33, N = 7;
  Tensor a = fine_f32({B, M, K}, 7).requires_grad_();
  Tensor b = fine_f32({K, N}, 8).requires_grad_();
  const Tensor up = fine_f32({B, M, N}, 9);
  Tensor y;
  {
    AutocastGuard bf16;
    y = matmul(a, b);
  }
  y.backward(up);
  const std::vector<double> ra = rounded(a), rb = rounded(b), g = rounded(up);
  std::vector<double> db(static_cast<size_t>(K * N), 0.0);
  for (int64_t i = 0; i < B; ++i) {
    const std::vector<double> ai(ra.begin() + i * M * K, ra.begin() + (i + 1) * M * K);
    const std::vector<double> gi(g.begin() + i * M * N, g.begin() + (i + 1) * M * N);
    const std::vector<double> yi = mm(ai, rb, M, K, N), dai = mm(gi, tr(rb, K, N), M, N, K);
    const std::vector<double> got_y = y.narrow(0, i, 1).to_vector<double>(), got_da = a.grad().narrow(0, i, 1).to_vector<double>();
    expect_near_all(got_y, yi, 2e-6 * scale_of(yi));
    expect_near_all(got_da, dai, 2e-6 * scale_of(dai));
    const std::vector<double> dbi = mm(tr(ai, M, K), gi, K, M, N);
    for (size_t j = 0; j < db.size(); ++j) db[j] += dbi[j];
  }
  expect_near_all(b.grad().to_vector<double>(), db, 4e-6 * scale_of(db));
}

// f64 is never autocast: the same bits with and without the guard, and
// gradcheck (float64) still passes under it.
TEST(Autocast, Float64IsUntouched) {
  const Tensor x = attograd::testing::randn_leaf({4, 6}, 10), w = attograd::testing::randn_leaf({3, 6}, 11);
  const std::vector<double> plain = linear(x, w, Tensor()).to_vector<double>();
  AutocastGuard bf16;
  EXPECT_EQ(linear(x, w, Tensor()).to_vector<double>(), plain);
  expect_gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], Tensor()); }, {x, w});
  expect_gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1].transpose(0, 1)); }, {x, w});
}

// Gradients of gradients: a create_graph backward runs under the precision
// its forward ran in, wherever it is called, so its first-order gradients are
// the plain backward's (on non-leaf inputs, where the saved copies are read,
// and on leaves, which the graph reaches itself), for linear, matmul and the
// fused attention; and a second derivative through it exists and is near f32's.
TEST(Autocast, CreateGraphKeepsTheForwardsPrecision) {
  const Tensor x0 = fine_f32({2, 4, 9, 8}, 12).requires_grad_(), w = fine_f32({8, 8}, 13).requires_grad_();
  const Tensor k0 = fine_f32({2, 2, 9, 8}, 14).requires_grad_(), up = fine_f32({2, 4, 9, 8}, 15);
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"linear", [&](const Tensor& x) { return linear(x, w, Tensor()); }},
      {"matmul", [&](const Tensor& x) { return matmul(x, w.transpose(0, 1)); }},
      {"attention", [&](const Tensor& x) {
         AttentionOptions o;
         o.is_causal = true;
         return scaled_dot_product_attention(x, k0 * 1.0, k0, o).out;
       }}};
  for (const auto& [name, op] : ops)
    for (bool leaf : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name << (leaf ? " on a leaf" : " on a non-leaf"));
      const std::vector<Tensor> wrt = {x0, w, k0};
      auto first = [&](bool create_graph) {
        Tensor y;
        {
          AutocastGuard bf16;
          y = op(leaf ? x0 : x0 * 1.0);
        }  // backward outside the guard: the forward's precision must come from the op
        return grad({sum(mul(y, up))}, wrt, {}, GradOptions{.create_graph = create_graph, .allow_unused = true});
      };
      const std::vector<Tensor> plain = first(false), graph = first(true);
      for (size_t i = 0; i < wrt.size(); ++i) {
        if (!plain[i].defined()) continue;
        const std::vector<double> want = plain[i].to_vector<double>();
        expect_near_all(graph[i].to_vector<double>(), want, 1e-5 * scale_of(want));
      }
      int defined = 0;  // d/d(wrt) of |dx|²: through the recorded backward (linear's dx depends on w only)
      for (const Tensor& g : grad({sum(mul(graph[0], graph[0]))}, wrt, {}, GradOptions{.allow_unused = true}))
        if (g.defined()) {
          ++defined;
          EXPECT_TRUE(std::isfinite(sum(mul(g, g)).item()));
        }
      EXPECT_GE(defined, 1);
    }
}

// gemm_bf16's kernels on every layout, with leading dims past the minimum,
// an odd and an even K, alpha and beta, and products large enough to be cut
// into pieces by rows and by columns: naive, widened and (on a CPU with
// AVX512-BF16) native agree with a double reference, and so does gemm_bf16,
// whatever kernel this CPU gets. The padding columns of out are never written.
TEST(Autocast, Bf16GemmKernelsAgree) {
  Generator gen(14);
  struct Case {
    int64_t M, N, K;
  };
  for (const int64_t pad : {3, 2})  // odd and even leading dims
  for (const Case c : {Case{19, 23, 41}, Case{70, 66, 64}, Case{300, 130, 64}, Case{96, 520, 48}, Case{300, 130, 41},
                       Case{96, 520, 47}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto& [alpha, beta] : {std::pair{0.75f, 0.5f}, std::pair{1.0f, 1.0f}, std::pair{0.5f, 0.0f}}) {
          const auto [M, N, K] = c;
          const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          std::vector<BFloat16> a(static_cast<size_t>((ta ? K : M) * lda)), b(static_cast<size_t>((tb ? N : K) * ldb));
          for (auto& v : a) v = BFloat16(gen.normal());
          for (auto& v : b) v = BFloat16(gen.normal());
          std::vector<float> c0(static_cast<size_t>(M * ldc));
          for (auto& v : c0) v = static_cast<float>(gen.normal());
          std::vector<double> want(static_cast<size_t>(M * N));
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = 0;
              for (int64_t k = 0; k < K; ++k)
                s += static_cast<double>(ta ? a[k * lda + i] : a[i * lda + k]) *
                     static_cast<double>(tb ? b[j * ldb + k] : b[k * ldb + j]);
              want[i * N + j] = alpha * s + beta * c0[i * ldc + j];
            }
          auto run = [&](auto kernel) {
            std::vector<float> out = c0;
            kernel(out.data(), a.data(), b.data(), M, N, K, ta, tb, lda, ldb, ldc, alpha, beta);
            std::vector<double> got;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) got.push_back(out[i * ldc + j]);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(out[i * ldc + j], c0[i * ldc + j]);
            return got;
          };
          SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " trans_a " << ta << " trans_b " << tb
                                            << " alpha " << alpha << " beta " << beta);
          const double tol = 2e-6 * std::sqrt(static_cast<double>(K)) * 8;  // f32 sums of K terms of size ~1
          {
            SCOPED_TRACE("naive");
            expect_near_all(run(gemm_bf16_naive), want, 1e-5);
          }
          {
            SCOPED_TRACE("widened");
            expect_near_all(run(gemm_bf16_widened), want, tol);
          }
          {
            SCOPED_TRACE("gemm_bf16");
            expect_near_all(run(gemm_bf16), want, tol);
          }
          bool ran = false;
          const std::vector<double> native = run([&](auto... args) { ran = gemm_bf16_native(args...); });
          EXPECT_EQ(ran, xsmm_bf16_native() && (beta == 0.0f || alpha == 1.0f));
          if (ran) {
            SCOPED_TRACE("native");
            expect_near_all(native, want, tol);
          }
        }
}

// The fused attention under autocast rounds where its composite twin's
// matmuls round (Q, K, V, P before P·V, grad, scale · dS), so the two agree
// to f32 summation error, forward and every gradient, with grouped K/V,
// a causal mask, padding and each of memory.h's choices; and both differ from
// the f32 op by bf16 rounding. What it keeps are the bf16 copies.
TEST(Autocast, FusedAttentionAgreesWithItsTwinUnderAutocast) {
  const int64_t B = 2, H = 4, G = 2, T = 9, D = 8;
  const Tensor pad = Tensor::from_vector(std::vector<bool>{false, false, false, false, false, false, false, true, true,
                                                           false, false, false, false, false, false, false, false, false},
                                         {B, T});
  for (AttentionSaves saves : {AttentionSaves::row_stats, AttentionSaves::probabilities}) {
    const MemoryOptionsGuard memory({.attention = saves});
    auto run = [&](bool fused, Precision precision) {
      Tensor q = fine_f32({B, H, T, D}, 20).requires_grad_(), k = fine_f32({B, G, T, D}, 21).requires_grad_(),
             v = fine_f32({B, G, T, D}, 22).requires_grad_();
      const Tensor up = fine_f32({B, H, T, D}, 23);
      AttentionOptions o;
      o.is_causal = true;
      o.key_padding_mask = pad;
      Tensor out;
      {
        AutocastGuard guard(precision);
        out = (fused ? scaled_dot_product_attention(q, k, v, o) : scaled_dot_product_attention_composite(q, k, v, o)).out;
      }
      if (fused && precision == Precision::bf16) {
        for (const SavedTensor& s : out.grad_fn()->saved)
          if (s.value.defined() && std::set<std::string>{"q", "k", "v", "q_in", "k_in", "v_in"}.count(s.name)) {
            EXPECT_EQ(s.value.dtype(), DType::bf16) << s.name;
          }
      }
      out.backward(up);
      return std::vector<std::vector<double>>{out.to_vector<double>(), q.grad().to_vector<double>(),
                                              k.grad().to_vector<double>(), v.grad().to_vector<double>()};
    };
    const auto fused = run(true, Precision::bf16), twin = run(false, Precision::bf16), f32 = run(true, Precision::f32);
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (size_t i = 0; i < fused.size(); ++i) {
      SCOPED_TRACE(names[i]);
      expect_near_all(fused[i], twin[i], 1e-5 * scale_of(twin[i]));
      double moved = 0;
      for (size_t j = 0; j < f32[i].size(); ++j) moved = std::max(moved, std::fabs(f32[i][j] - fused[i][j]));
      EXPECT_GT(moved, 1e-4 * scale_of(f32[i]));  // bf16's rounding shows
      EXPECT_LT(moved, 5e-2 * scale_of(f32[i]));  // and is only that
    }
  }
}
