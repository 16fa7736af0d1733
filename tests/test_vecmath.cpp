// attograd/autograd/backend/vecmath.h: every kernel set this CPU runs (scalar always;
// AVX2, AVX-512 when present) against std:: float64 math, within the stated
// 1.0 ulp, over sweeps that include the edges.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include <attograd/autograd/backend/vecmath.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/autograd/ops/shape.h>
#include <attograd/version.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_close;
using attograd::testing::uniform_leaf;
using attograd::testing::expect_error;

namespace {

constexpr double kUlpBound = 1.0;  // SLEEF's u10 functions
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<const VecMath*> supported() {
  std::vector<const VecMath*> out;
  for (VecIsa isa : {VecIsa::scalar, VecIsa::avx2, VecIsa::avx512})
    if (const VecMath* m = vecmath_for(isa)) out.push_back(m);
  return out;
}

// The float spacing at |want| (denormal spacing below the normal range).
double ulp_at(double want) {
  const double a = std::fabs(want);
  if (a < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// Error of got in units of the float spacing at the exact value; a float that
// must overflow (|want| beyond FLT_MAX rounded) is exact only as ±inf.
double ulp_error(float got, double want) {
  if (std::isnan(want)) return std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(want) || std::fabs(want) > std::numeric_limits<float>::max())
    return std::isinf(got) && std::signbit(got) == std::signbit(want) ? 0 : INFINITY;
  return std::fabs(static_cast<double>(got) - want) / ulp_at(want);
}

using Kernel = void (*)(float*, const float*, int64_t);

// Worst ulp error of kernel over xs, reporting the worst input.
void expect_within_bound(const char* what, const VecMath& m, Kernel kernel, double (*ref)(double),
                         const std::vector<float>& xs) {
  std::vector<float> ys(xs.size());
  kernel(ys.data(), xs.data(), static_cast<int64_t>(xs.size()));
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = ulp_error(ys[i], ref(xs[i]));
    if (!(e <= worst)) worst = e, worst_x = xs[i];
  }
  EXPECT_LE(worst, kUlpBound) << what << " [" << m.name << "] worst at x = " << worst_x;
}

// n points evenly over [lo, hi], plus the edges every function must handle.
std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> xs;
  for (int i = 0; i <= n; ++i) xs.push_back(lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n));
  const float denorm = std::numeric_limits<float>::denorm_min();
  for (float v : {0.0f, -0.0f, denorm, -denorm, 1e-40f, -1e-40f, std::numeric_limits<float>::min(), 1e-30f,
                  -1e-30f, 1e-7f, -1e-7f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest()})
    xs.push_back(v);
  return xs;
}

double exp_ref(double v) { return std::exp(v); }
double tanh_ref(double v) { return std::tanh(v); }
double erf_ref(double v) { return std::erf(v); }

}  // namespace

TEST(VecMath, ScalarIsAlwaysThereAndTheChosenSetIsSupported) {
  ASSERT_NE(vecmath_for(VecIsa::scalar), nullptr);
  EXPECT_NE(vecmath_for(vecmath().isa), nullptr);
}

TEST(VecMath, NamesPickASetAndAnUnknownNameIsAnError) {
  EXPECT_EQ(vecmath_named("scalar").isa, VecIsa::scalar);
  for (VecIsa isa : {VecIsa::avx2, VecIsa::avx512}) {
    const VecMath& m = vecmath_named(isa == VecIsa::avx2 ? "avx2" : "avx512");
    EXPECT_EQ(m.isa, vecmath_for(isa) ? isa : vecmath().isa) << m.name;
  }
  expect_error<ValueError>([] { vecmath_named("avx1024"); }, {"vecmath", "avx1024", "scalar, avx2, avx512"});
}

// exp over its whole float range: results from the largest float down
// through the denormals (x < -87.3) to 0 (x < -103.98), and overflow to inf
// above 88.72.
TEST(VecMath, ExpWithinOneUlp) {
  for (const VecMath* m : supported()) {
    expect_within_bound("exp", *m, m->exp, exp_ref, sweep(-110.0f, 90.0f, 400000));
    expect_within_bound("exp", *m, m->exp, exp_ref, sweep(-1.0f, 1.0f, 100000));
    expect_within_bound("exp", *m, m->exp, exp_ref, sweep(-104.5f, -86.5f, 100000));
  }
}

TEST(VecMath, TanhWithinOneUlp) {
  for (const VecMath* m : supported()) {
    expect_within_bound("tanh", *m, m->tanh, tanh_ref, sweep(-12.0f, 12.0f, 400000));
    expect_within_bound("tanh", *m, m->tanh, tanh_ref, sweep(-1e-3f, 1e-3f, 100000));
  }
}

TEST(VecMath, ErfWithinOneUlp) {
  for (const VecMath* m : supported()) {
    expect_within_bound("erf", *m, m->erf, erf_ref, sweep(-6.0f, 6.0f, 400000));
    expect_within_bound("erf", *m, m->erf, erf_ref, sweep(-1e-3f, 1e-3f, 100000));
  }
}

// The values softmax and the attention masks rely on, exactly.
TEST(VecMath, ExactEdges) {
  for (const VecMath* m : supported()) {
    const std::vector<float> xs = {-kInf, 0.0f, -200.0f, 100.0f, kInf, std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> e(xs.size()), t(xs.size()), f(xs.size());
    m->exp(e.data(), xs.data(), 6);
    m->tanh(t.data(), xs.data(), 6);
    m->erf(f.data(), xs.data(), 6);
    EXPECT_EQ(e[0], 0.0f) << m->name;  // a masked score gets exactly 0 weight
    EXPECT_EQ(e[1], 1.0f) << m->name;
    EXPECT_EQ(e[2], 0.0f) << m->name;
    EXPECT_EQ(e[3], kInf) << m->name;
    EXPECT_EQ(e[4], kInf) << m->name;
    EXPECT_EQ(t[0], -1.0f) << m->name;
    EXPECT_EQ(t[4], 1.0f) << m->name;
    EXPECT_EQ(f[0], -1.0f) << m->name;
    EXPECT_EQ(f[4], 1.0f) << m->name;
    EXPECT_TRUE(std::isnan(e[5]) && std::isnan(t[5]) && std::isnan(f[5])) << m->name;  // NaN propagates
  }
}

// Every length (the vector body, the masked tail) writes exactly y[0, n),
// in place too.
TEST(VecMath, EveryLengthWritesExactlyItsElements) {
  for (const VecMath* m : supported()) {
    for (Kernel kernel : {m->exp, m->tanh, m->erf}) {
      for (int64_t n = 0; n <= 40; ++n) {
        std::vector<float> x(n + 8), y(n + 8, -7.0f);
        for (int64_t i = 0; i < n + 8; ++i) x[i] = 0.1f * static_cast<float>(i) - 1.0f;
        kernel(y.data(), x.data(), n);
        std::vector<float> z = x;
        kernel(z.data(), z.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_NE(y[i], -7.0f) << m->name << " n=" << n << " i=" << i;
          EXPECT_EQ(std::bit_cast<uint32_t>(z[i]), std::bit_cast<uint32_t>(y[i])) << m->name << " in place";
        }
        for (int64_t i = n; i < n + 8; ++i) {
          EXPECT_EQ(y[i], -7.0f) << m->name << " n=" << n << " wrote past the end at " << i;
          EXPECT_EQ(z[i], x[i]) << m->name << " n=" << n << " in place wrote past the end at " << i;
        }
      }
    }
  }
}

// The AVX2 and AVX-512 sets run one SLEEF algorithm: the same bits, so a
// result does not depend on which of the two a machine has.
TEST(VecMath, VectorSetsAgreeBitForBit) {
  const VecMath *a = vecmath_for(VecIsa::avx2), *b = vecmath_for(VecIsa::avx512);
  if (!build_features().sleef) GTEST_SKIP() << "built without SLEEF (ATTOGRAD_SLEEF=OFF): the scalar set only";
  if (!a || !b) GTEST_SKIP() << "this CPU lacks AVX2 or AVX-512";
  const std::vector<float> xs = sweep(-110.0f, 90.0f, 200000);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (auto pick : {+[](const VecMath* v) { return v->exp; }, +[](const VecMath* v) { return v->tanh; },
                    +[](const VecMath* v) { return v->erf; }}) {
    std::vector<float> ya(xs.size()), yb(xs.size());
    pick(a)(ya.data(), xs.data(), n);
    pick(b)(yb.data(), xs.data(), n);
    EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)));
  }
}

// The float32 softmax row (vec_exp in blocks of kVecBlock) against float64
// std:: math, across a block boundary, with masked (-inf) entries.
TEST(VecMath, Float32SoftmaxRowMatchesFloat64) {
  const int64_t n = 3 * kVecBlock + 5;
  std::vector<float> x(n), y(n);
  std::vector<double> xd(n), yd(n);
  for (int64_t k = 0; k < n; ++k) {
    x[k] = k % 7 == 3 ? -kInf : 0.013f * static_cast<float>((k * 37) % 101) - 0.6f;
    xd[k] = x[k];
  }
  softmax_row(y.data(), x.data(), n);
  softmax_row(yd.data(), xd.data(), n);
  for (int64_t k = 0; k < n; ++k) {
    if (k % 7 == 3) {
      EXPECT_EQ(y[k], 0.0f);
    }
    EXPECT_NEAR(y[k], yd[k], 4e-7 * yd[k] + 1e-12) << k;
  }
}

// log_softmax forward and backward rows in float32 (vec_exp) against float64,
// across a block boundary, and a fully masked row's zero gradient.
TEST(VecMath, Float32LogSoftmaxRowsMatchFloat64) {
  const int64_t n = 2 * kVecBlock + 9;
  std::vector<float> x(n), y(n), g(n), dx(n);
  std::vector<double> xd(n), yd(n), gd(n), dxd(n);
  for (int64_t k = 0; k < n; ++k) {
    x[k] = 0.021f * static_cast<float>((k * 53) % 89) - 0.9f;
    g[k] = 0.01f * static_cast<float>(k % 13) - 0.05f;
    xd[k] = x[k], gd[k] = g[k];
  }
  log_softmax_row(y.data(), x.data(), n);
  log_softmax_row(yd.data(), xd.data(), n);
  for (int64_t k = 0; k < n; ++k) EXPECT_NEAR(y[k], yd[k], 2e-6) << k;
  log_softmax_backward_row(dx.data(), g.data(), y.data(), n);
  log_softmax_backward_row(dxd.data(), gd.data(), yd.data(), n);
  for (int64_t k = 0; k < n; ++k) EXPECT_NEAR(dx[k], dxd[k], 1e-6) << k;
  const std::vector<float> masked(n, -kInf);
  log_softmax_backward_row(dx.data(), g.data(), masked.data(), n);
  for (int64_t k = 0; k < n; ++k) EXPECT_EQ(dx[k], 0.0f) << k;
}

// The float32 elementwise ops on vecmath.h's blocks, forward and backward,
// against the same ops in float64 (std:: math): inputs over [-8, 8] on
// [3, 700] (several blocks, a short last one), and a transposed view.
TEST(VecMath, Float32ElementwiseOpsMatchFloat64) {
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> ops = {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu(tanh)", [](const Tensor& x) { return gelu(x, GeluApprox::tanh); }},
  };
  const Tensor x64 = uniform_leaf({3, 700}, 7, -8, 8).detach();
  const Tensor w64 = uniform_leaf({3, 700}, 8, -1, 1).detach();
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    Tensor a = x64.detach().requires_grad_(true), b = x64.to(DType::f32).requires_grad_(true);
    const Tensor ya = op(a), yb = op(b);
    expect_close(yb, ya, 2e-6, 1e-6);  // 1e-6: f32 gelu(tanh) is 0 where 1 + tanh u cancels (x < -5)
    sum(ya * w64).backward();
    sum(yb * w64.to(DType::f32)).backward();
    expect_close(b.grad(), a.grad(), 1e-5, 1e-6);
    // A transposed (non-contiguous) input gives the same values as its contiguous copy.
    const Tensor xt = transpose(x64.to(DType::f32), 0, 1);
    expect_close(op(xt), op(xt.contiguous()), 0, 0);
  }
}
