// The kernel layer (attograd/autograd/kernels/): the strided walk over several
// layouts, the row kernels against naive formulas and the fully masked row,
// and the in-place add.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include <attograd/autograd/kernels/add.h>
#include <attograd/autograd/kernels/rows.h>
#include <attograd/autograd/kernels/walk.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_near_all;

namespace {

using Offsets = std::vector<std::vector<int64_t>>;

// Every visit of a two-layout walk, as {a_offset, b_offset}.
Offsets walk2(const Shape& shape, const Shape& sa, int64_t ba, const Shape& sb, int64_t bb) {
  Offsets seen;
  for_each_offset(shape, [&](int64_t a, int64_t b) { seen.push_back({a, b}); }, Strided{sa, ba}, Strided{sb, bb});
  return seen;
}

// The same visits computed naively: every row-major index, its dot with each layout's strides.
Offsets naive_walk2(const Shape& shape, const Shape& sa, int64_t ba, const Shape& sb, int64_t bb) {
  Offsets seen;
  const int64_t n = shape_numel(shape);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, a = ba, b = bb;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t i = rest % shape[d];
      rest /= shape[d];
      a += i * sa[d];
      b += i * sb[d];
    }
    seen.push_back({a, b});
  }
  return seen;
}

std::vector<double> naive_softmax(const std::vector<double>& x) {
  double mx = -INFINITY, total = 0;
  for (double v : x) mx = std::max(mx, v);
  for (double v : x) total += std::exp(v - mx);
  std::vector<double> y;
  for (double v : x) y.push_back(std::exp(v - mx) / total);
  return y;
}

// Element k of a row stored `stride` apart.
std::vector<double> gather_row(const std::vector<double>& buf, int64_t n, int64_t stride) {
  std::vector<double> row;
  for (int64_t k = 0; k < n; ++k) row.push_back(buf[k * stride]);
  return row;
}

// A row of n values stored `stride` apart; the gaps hold 7.0, which no kernel may overwrite.
std::vector<double> spread(const std::vector<double>& row, int64_t stride) {
  std::vector<double> buf(row.size() * stride, 7.0);
  for (size_t k = 0; k < row.size(); ++k) buf[k * stride] = row[k];
  return buf;
}

const std::vector<double> kRow = {0.5, -1.25, 3.0, 2.0, -0.75, 1.5, 0.0};

}  // namespace

// ---- the strided walk ----------------------------------------------------

TEST(Walk, ContiguousVisitsOffsetsInOrder) {
  std::vector<int64_t> seen;
  for_each_offset({2, 3}, {3, 1}, 10, [&](int64_t o) { seen.push_back(o); });
  EXPECT_EQ(seen, (std::vector<int64_t>{10, 11, 12, 13, 14, 15}));
}

TEST(Walk, ZeroDimVisitsTheBaseOnce) {
  std::vector<int64_t> seen;
  for_each_offset({}, {}, 4, [&](int64_t o) { seen.push_back(o); });
  EXPECT_EQ(seen, (std::vector<int64_t>{4}));
  EXPECT_EQ(walk2({}, {}, 2, {}, 9), (Offsets{{2, 9}}));
}

TEST(Walk, ZeroSizeDimVisitsNothing) {
  for (const Shape& shape : {Shape{0}, Shape{3, 0}, Shape{0, 4}, Shape{2, 0, 3}}) {
    int calls = 0;
    const Shape st = contiguous_strides(shape);
    for_each_offset(shape, st, 0, [&](int64_t) { ++calls; });
    EXPECT_EQ(calls, 0) << shape_str(shape);
    EXPECT_TRUE(walk2(shape, st, 0, st, 0).empty()) << shape_str(shape);
  }
}

TEST(Walk, TwoLayoutsMatchTheNaiveIndexFormula) {
  struct Case {
    Shape shape, sa, sb;
    int64_t ba, bb;
  };
  const Case cases[] = {
      {{2, 3, 4}, {12, 4, 1}, {1, 2, 6}, 0, 5},     // contiguous vs a permuted layout
      {{3, 2}, {1, 3}, {2, 1}, 1, 0},               // transposed vs contiguous
      {{2, 3, 4}, {0, 4, 1}, {12, 0, 0}, 0, 0},     // broadcast: stride 0 along some dims
      {{5}, {-1}, {2}, 4, 0},                       // a reversed and a strided 1-d layout
      {{2, 1, 3}, {3, 3, 1}, {6, 100, 2}, 0, 1},    // a size-1 dim (its stride is never used)
      {{4, 1}, {1, 1}, {1, 0}, 0, 0},               // a size-1 inner dim
  };
  for (const Case& c : cases) EXPECT_EQ(walk2(c.shape, c.sa, c.ba, c.sb, c.bb), naive_walk2(c.shape, c.sa, c.ba, c.sb, c.bb));
}

TEST(Walk, ThreeLayoutsInStepAndTheOneLayoutFormAgree) {
  const Shape shape{3, 2, 2}, s1{4, 2, 1}, s2{1, 6, 3}, s3{0, 1, 0};
  std::vector<std::tuple<int64_t, int64_t, int64_t>> three;
  for_each_offset(shape, [&](int64_t a, int64_t b, int64_t c) { three.emplace_back(a, b, c); }, Strided{s1, 0},
                  Strided{s2, 1}, Strided{s3, 2});
  std::vector<int64_t> one_a, one_b, one_c;
  for_each_offset(shape, s1, 0, [&](int64_t o) { one_a.push_back(o); });
  for_each_offset(shape, s2, 1, [&](int64_t o) { one_b.push_back(o); });
  for_each_offset(shape, s3, 2, [&](int64_t o) { one_c.push_back(o); });
  ASSERT_EQ(three.size(), 12u);
  for (size_t i = 0; i < three.size(); ++i)
    EXPECT_EQ(three[i], std::make_tuple(one_a[i], one_b[i], one_c[i])) << "visit " << i;
  EXPECT_EQ(std::get<2>(three.back()), 2 + 1);  // s3 moves along dim 1 only
}

TEST(Walk, TensorCopyThroughTwoLayouts) {
  const Tensor x = Tensor::arange(0, 6, 1, DType::f64).reshape({2, 3});
  Tensor t = Tensor::zeros({3, 2}, DType::f64);
  t.copy_(x.transpose(0, 1));
  EXPECT_EQ(attograd::testing::vals(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

// ---- row kernels ---------------------------------------------------------

TEST(RowKernels, LaneSumIsExactForIntegersAtEveryLength) {
  for (int64_t n : {0, 1, 15, 16, 17, 33, 100}) {
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += static_cast<double>(i * i);
    EXPECT_EQ(lane_sum<double>(n, [](int64_t i) { return static_cast<double>(i * i); }), want) << n;
  }
}

TEST(RowKernels, SoftmaxAndLogSoftmaxMatchNaiveFormulas) {
  const std::vector<double> want = naive_softmax(kRow);
  const int64_t n = static_cast<int64_t>(kRow.size());
  for (int64_t stride : {1, 3}) {
    SCOPED_TRACE(stride);
    std::vector<double> x = spread(kRow, stride), y(x.size(), 7.0), ly(x.size(), 7.0);
    softmax_row(y.data(), x.data(), n, stride);
    log_softmax_row(ly.data(), x.data(), n, stride);
    expect_near_all(gather_row(y, n, stride), want, 1e-15);
    std::vector<double> log_want;
    for (double p : want) log_want.push_back(std::log(p));
    expect_near_all(gather_row(ly, n, stride), log_want, 1e-14);
    if (stride > 1) {
      EXPECT_EQ(y[1], 7.0);  // the gaps are not written
    }
  }
}

TEST(RowKernels, StridedAndContiguousRowsGiveTheSameBits) {
  const int64_t n = static_cast<int64_t>(kRow.size());
  std::vector<float> row(kRow.begin(), kRow.end()), wide(row.size() * 4, 0.f);
  for (int64_t k = 0; k < n; ++k) wide[k * 4] = row[k];
  std::vector<float> y1(row.size()), y4(wide.size());
  softmax_row(y1.data(), row.data(), n);
  softmax_row(y4.data(), wide.data(), n, 4);
  for (int64_t k = 0; k < n; ++k) EXPECT_EQ(y1[k], y4[k * 4]) << k;
  EXPECT_EQ(logsumexp_row(row.data(), n), logsumexp_row(wide.data(), n, 4));
}

TEST(RowKernels, LogSumExpMatchesNaiveAndIsStable) {
  double naive = 0;
  for (double v : kRow) naive += std::exp(v);
  EXPECT_NEAR(logsumexp_row(kRow.data(), static_cast<int64_t>(kRow.size())), std::log(naive), 1e-14);
  const std::vector<float> big = {1000.f, 1000.f};  // exp(1000) overflows; the max shift keeps it finite
  EXPECT_NEAR(logsumexp_row(big.data(), 2), 1000 + std::log(2.0), 1e-12);
}

TEST(RowKernels, FullyMaskedRowGivesZerosAndNoNaN) {
  const std::vector<double> x(4, -INFINITY), g = {1, 2, 3, 4};
  std::vector<double> y(4, 7.0), ly(4, 7.0), dx(4, 7.0), ldx(4, 7.0);
  softmax_row(y.data(), x.data(), 4);
  log_softmax_row(ly.data(), x.data(), 4);
  EXPECT_EQ(y, (std::vector<double>{0, 0, 0, 0}));
  for (double v : ly) EXPECT_EQ(v, -INFINITY);
  EXPECT_EQ(logsumexp_row(x.data(), 4), -INFINITY);
  EXPECT_TRUE(row_max(x.data(), 4).masked);
  softmax_backward_row(dx.data(), g.data(), y.data(), 4);
  log_softmax_backward_row(ldx.data(), g.data(), ly.data(), 4);
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(ldx, (std::vector<double>{0, 0, 0, 0}));
}

TEST(RowKernels, PartlyMaskedRowRenormalizesAndNaNPropagates) {
  const std::vector<double> x = {1.0, -INFINITY, 2.0};
  std::vector<double> y(3);
  softmax_row(y.data(), x.data(), 3);
  EXPECT_FALSE(row_max(x.data(), 3).masked);
  EXPECT_EQ(y[1], 0.0);
  expect_near_all({y[0], y[2]}, naive_softmax({1.0, 2.0}), 1e-15);
  const std::vector<double> bad = {-INFINITY, NAN};
  softmax_row(y.data(), bad.data(), 2);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_FALSE(row_max(bad.data(), 2).masked);
}

TEST(RowKernels, BackwardRowsMatchNaiveFormulasAndWorkInPlace) {
  const int64_t n = static_cast<int64_t>(kRow.size());
  const std::vector<double> y = naive_softmax(kRow), g = {0.3, -1.0, 2.0, 0.5, 0.25, -0.5, 1.0};
  double dot = 0, gsum = 0;
  for (int64_t k = 0; k < n; ++k) {
    dot += g[k] * y[k];
    gsum += g[k];
  }
  std::vector<double> want, log_want, ly;
  for (int64_t k = 0; k < n; ++k) {
    want.push_back(y[k] * (g[k] - dot));
    log_want.push_back(g[k] - y[k] * gsum);
    ly.push_back(std::log(y[k]));
  }
  std::vector<double> dx(n), ldx(n), inplace = g;
  softmax_backward_row(dx.data(), g.data(), y.data(), n);
  log_softmax_backward_row(ldx.data(), g.data(), ly.data(), n);
  softmax_backward_row(inplace.data(), inplace.data(), y.data(), n);  // dx aliases g
  expect_near_all(dx, want, 1e-15);
  expect_near_all(ldx, log_want, 1e-14);
  EXPECT_EQ(inplace, dx);
}

// ---- in-place add ----------------------------------------------------------

TEST(AddKernel, FlatAndStridedWithBroadcast) {
  std::vector<double> acc = {1, 2, 3, 4}, g = {10, 20, 30, 40};
  add_into(acc.data(), acc.data(), g.data(), 4);
  EXPECT_EQ(acc, (std::vector<double>{11, 22, 33, 44}));
  // acc [2, 2] transposed (strides {1, 2}) += row [2] broadcast over dim 0 (strides {0, 1})
  std::vector<double> m = {0, 0, 0, 0};
  const std::vector<double> row = {1, 2};
  add_into(m.data(), row.data(), {2, 2}, Strided{{1, 2}, 0}, Strided{{0, 1}, 0});
  EXPECT_EQ(m, (std::vector<double>{1, 1, 2, 2}));
}

TEST(AddKernel, TensorAddOfOverlappingViewsReadsTheOldValues) {
  Tensor x = Tensor::from_list({1, 2, 3, 4}, {2, 2}, DType::f64);
  Tensor xt = x.transpose(0, 1);
  add_(x, xt);  // x += xᵀ: every read must see x before the add
  EXPECT_EQ(attograd::testing::vals(x), (std::vector<double>{2, 5, 5, 8}));
  const Tensor s = add_values(x, Tensor::from_list({1, 1}, {2}, DType::f64));
  EXPECT_EQ(attograd::testing::vals(s), (std::vector<double>{3, 6, 6, 9}));
  EXPECT_EQ(attograd::testing::vals(x), (std::vector<double>{2, 5, 5, 8}));
}
