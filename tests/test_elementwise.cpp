// Elementwise ops: forward values, gradcheck of every differentiable input,
// broadcasting, non-contiguous inputs, masks, and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/map_zip.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// Values with |v| in [0.3, 2): away from the kinks of abs/relu at 0.
Tensor away_from_zero(const Shape& s, uint64_t seed) {
  Tensor x = uniform_leaf(s, seed, 0.3, 2.0).detach();
  double* p = x.data<double>();
  for (int64_t i = 0; i < x.numel(); i += 2) p[i] = -p[i];
  return x.requires_grad_();
}
// A non-contiguous leaf: the transpose of a random [s1, s0] tensor.
Tensor transposed_leaf(const Shape& s, uint64_t seed, double lo = -2, double hi = 2) {
  Tensor t = uniform_leaf({s[1], s[0]}, seed, lo, hi).detach().transpose(0, 1).detach().requires_grad_();
  EXPECT_FALSE(t.is_contiguous());
  return t;
}

using Unary = std::function<Tensor(const Tensor&)>;
struct UnaryCase {
  const char* name;
  Unary op;
  double (*ref)(double);
  enum Domain { any, positive, nonzero } domain;
};

double ref_sigmoid(double v) { return 1 / (1 + std::exp(-v)); }
double ref_relu(double v) { return v > 0 ? v : 0; }
double ref_neg(double v) { return -v; }
double ref_exp(double v) { return std::exp(v); }
double ref_log(double v) { return std::log(v); }
double ref_sqrt(double v) { return std::sqrt(v); }
double ref_abs(double v) { return std::abs(v); }
double ref_tanh(double v) { return std::tanh(v); }

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, ref_neg, UnaryCase::any},
      {"exp", [](const Tensor& x) { return exp(x); }, ref_exp, UnaryCase::any},
      {"log", [](const Tensor& x) { return log(x); }, ref_log, UnaryCase::positive},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, ref_sqrt, UnaryCase::positive},
      {"abs", [](const Tensor& x) { return abs(x); }, ref_abs, UnaryCase::nonzero},
      {"tanh", [](const Tensor& x) { return tanh(x); }, ref_tanh, UnaryCase::any},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, ref_sigmoid, UnaryCase::any},
      {"relu", [](const Tensor& x) { return relu(x); }, ref_relu, UnaryCase::nonzero},
  };
  return cases;
}

Tensor input_for(UnaryCase::Domain d, const Shape& s, uint64_t seed) {
  if (d == UnaryCase::positive) return uniform_leaf(s, seed, 0.2, 3.0);
  if (d == UnaryCase::nonzero) return away_from_zero(s, seed);
  return uniform_leaf(s, seed);
}

}  // namespace

// ---- unary ops ----------------------------------------------------------------------

TEST(Unary, KnownValues) {
  const Tensor x = f64({-2, -0.5, 0, 1, 4}, {5});
  EXPECT_EQ(vals(neg(x)), (std::vector<double>{2, 0.5, -0.0, -1, -4}));
  EXPECT_EQ(vals(abs(x)), (std::vector<double>{2, 0.5, 0, 1, 4}));
  EXPECT_EQ(vals(relu(x)), (std::vector<double>{0, 0, 0, 1, 4}));
  EXPECT_EQ(vals(-x), vals(neg(x)));
  expect_near_all(vals(exp(f64({0, 1, -1}, {3}))), {1, 2.718281828459045, 0.36787944117144233});
  expect_near_all(vals(log(f64({1, 2.718281828459045, 0.5}, {3}))), {0, 1, -0.6931471805599453});
  EXPECT_EQ(vals(sqrt(f64({4, 0.25, 0}, {3}))), (std::vector<double>{2, 0.5, 0}));
  expect_near_all(vals(tanh(f64({0, 1, -20}, {3}))), {0, 0.7615941559557649, -1});
  expect_near_all(vals(sigmoid(f64({0, 2, -2}, {3}))), {0.5, 0.8807970779778823, 0.11920292202211755});
  // sigmoid stays finite and exact at the extremes (no exp overflow)
  EXPECT_EQ(vals(sigmoid(f64({-1000, 1000}, {2}))), (std::vector<double>{0, 1}));
  EXPECT_EQ(vals(sigmoid(Tensor::from_list({-200, 200}, {2}))), (std::vector<double>{0, 1}));
  // f32 in, f32 out
  EXPECT_EQ(exp(Tensor::zeros({2})).dtype(), DType::f32);
}

TEST(Unary, MatchReferenceAndGradcheck) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor x = input_for(c.domain, {3, 4}, 11);
    Tensor y = c.op(x);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.grad_fn_name(), c.name);
    std::vector<double> want;
    for (double v : vals(x)) want.push_back(c.ref(v));
    expect_near_all(vals(y), want, 1e-14);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x});
  }
}

TEST(Unary, NonContiguousInputs) {
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor base = input_for(c.domain, {4, 3}, 12).detach();
    Tensor t = base.transpose(0, 1);  // [3, 4], strided
    EXPECT_EQ(vals(c.op(t)), vals(c.op(t.contiguous())));
    Tensor s = base.slice(0, 0, 4, 2);  // every other row
    EXPECT_EQ(vals(c.op(s)), vals(c.op(s.contiguous())));
    Tensor xt = transposed_leaf({3, 4}, 13, c.domain == UnaryCase::positive ? 0.2 : 0.3, 2.0);
    expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {xt});
  }
}

TEST(Unary, KinksFollowPyTorch) {
  // d|x| at 0 is 0; relu' at 0 is 0 (PyTorch's choices).
  Tensor x = f64({-1, 0, 2}, {3}).requires_grad_();
  sum(abs(x)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{-1, 0, 1}));
  x.zero_grad();
  sum(relu(x)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0, 1}));
}

TEST(Unary, RejectNonFloating) {
  const Tensor i = Tensor::zeros({2}, DType::i64);
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    expect_error<DTypeError>([&] { c.op(i); }, {c.name, "i64", "floating"});
  }
}

// ---- gelu --------------------------------------------------------------------------------

TEST(Gelu, MatchesPyTorchBothForms) {
  // torch.nn.functional.gelu(x, approximate=...) and its gradient, float64.
  const Tensor x = f64({-3, -1, -0.5, 0, 0.5, 1, 2.5}, {7});
  const std::vector<double> exact = {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                                     0.34573123063700656,  0.841344746068543,    2.4844758366855597};
  const std::vector<double> exact_grad = {-0.01194564720418392, -0.08331547058768635, 0.13250487534383712, 0.5,
                                          0.8674951246561629,   1.0833154705876864,   1.037611085908145};
  const std::vector<double> approx = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                      0.34571400982514394,    0.8411919906082768,   2.484915733910001};
  const std::vector<double> approx_grad = {-0.011584166630969648, -0.08296408384578252, 0.13263009646535764, 0.5,
                                           0.8673699035346424,    1.0829640838457826,   1.037951576212666};
  for (auto [form, want, want_grad] : {std::tuple{GeluApprox::none, exact, exact_grad},
                                       std::tuple{GeluApprox::tanh, approx, approx_grad}}) {
    Tensor xl = x.clone().requires_grad_();
    Tensor y = gelu(xl, form);
    expect_near_all(vals(y), want, 1e-15);
    sum(y).backward();
    expect_near_all(vals(xl.grad()), want_grad, 1e-15);
    expect_gradcheck([form = form](const std::vector<Tensor>& in) { return gelu(in[0], form); }, {uniform_leaf({2, 5}, 3, -3, 3)});
    // f32 agrees with f64 to float precision
    expect_near_all(vals(gelu(x.to(DType::f32), form)), want, 1e-6);
  }
  EXPECT_EQ(vals(gelu(x)), exact);  // the default is the exact form
}

// ---- clamp -------------------------------------------------------------------------------

TEST(Clamp, BothBoundsOneBoundAndGradient) {
  Tensor x = f64({-1, 0, 1, 2, 3}, {5}).requires_grad_();
  EXPECT_EQ(vals(clamp(x, 0.0, 2.0)), (std::vector<double>{0, 0, 1, 2, 2}));
  EXPECT_EQ(vals(clamp(x, 0.5, std::nullopt)), (std::vector<double>{0.5, 0.5, 1, 2, 3}));
  EXPECT_EQ(vals(clamp(x, std::nullopt, 1.5)), (std::vector<double>{-1, 0, 1, 1.5, 1.5}));
  EXPECT_EQ(vals(clamp(x, std::nullopt, std::nullopt)), vals(x));
  sum(clamp(x, 0.0, 2.0)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 1, 1, 1, 0}));  // PyTorch: bounds inclusive
  x.zero_grad();
  sum(clamp(x, std::nullopt, 1.5)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 1, 1, 0, 0}));
  Tensor r = uniform_leaf({3, 4}, 21);
  expect_gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], -0.95, 1.05); }, {r});
  expect_gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], 0.05, std::nullopt); }, {r});
  expect_gradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], std::nullopt, -0.05); }, {r});
  expect_error<ValueError>([&] { clamp(x, 2.0, 1.0); }, {"clamp", "lo"});
}

// ---- binary ops ------------------------------------------------------------------------------

TEST(Binary, ValuesSameShape) {
  const Tensor a = f64({1, 2, 3, 4}, {2, 2}), b = f64({2, -1, 0.5, 4}, {2, 2});
  EXPECT_EQ(vals(add(a, b)), (std::vector<double>{3, 1, 3.5, 8}));
  EXPECT_EQ(vals(sub(a, b)), (std::vector<double>{-1, 3, 2.5, 0}));
  EXPECT_EQ(vals(mul(a, b)), (std::vector<double>{2, -2, 1.5, 16}));
  EXPECT_EQ(vals(div(a, b)), (std::vector<double>{0.5, -2, 6, 1}));
  EXPECT_EQ(vals(pow(a, b)), (std::vector<double>{1, 0.5, std::sqrt(3.0), 256}));
  EXPECT_EQ(vals(a + b), vals(add(a, b)));
  EXPECT_EQ(vals(a - b), vals(sub(a, b)));
  EXPECT_EQ(vals(a * b), vals(mul(a, b)));
  EXPECT_EQ(vals(a / b), vals(div(a, b)));
  EXPECT_EQ(add(a, b).grad_fn(), nullptr);  // nothing requires grad: no node
}

namespace {
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
struct BinaryCase {
  const char* name;
  Binary op;
  bool positive_a, nonzero_b;
};
const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, false, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, false, false},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, false, false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, false, true},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true, false},
  };
  return cases;
}
Tensor binary_input(const Shape& s, uint64_t seed, bool positive, bool nonzero) {
  if (positive) return uniform_leaf(s, seed, 0.3, 2.0);
  if (nonzero) return away_from_zero(s, seed);
  return uniform_leaf(s, seed);
}
}  // namespace

TEST(Binary, GradcheckBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{3, 1}, {1, 4}}, {{4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{}, {2, 3}},
      {{2, 3}, {}},     {{}, {}},         {{2, 1, 3}, {4, 1}}};
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(fmt::format("{} {} x {}", c.name, shape_str(sa), shape_str(sb)));
      Tensor a = binary_input(sa, 31, c.positive_a, false), b = binary_input(sb, 32, false, c.nonzero_b);
      Tensor y = c.op(a, b);
      EXPECT_EQ(y.shape(), broadcast_shapes(sa, sb, "test"));
      expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b});
      // each input alone
      expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b.detach()});
      expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a.detach(), b});
    }
  }
}

TEST(Binary, BroadcastValues) {
  const Tensor col = f64({1, 2, 3}, {3, 1}), row = f64({10, 20, 30, 40}, {1, 4});
  EXPECT_EQ(vals(col + row), (std::vector<double>{11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43}));
  EXPECT_EQ((col * row).shape(), (Shape{3, 4}));
  const Tensor v = f64({1, 2, 3, 4}, {4});
  const Tensor m = Tensor::arange(0, 24, 1, DType::f64).reshape({2, 3, 4});
  const std::vector<double> mv = vals(m - v), mm = vals(m);
  for (size_t i = 0; i < mv.size(); ++i) EXPECT_EQ(mv[i], mm[i] - (i % 4 + 1.0));
  EXPECT_EQ(vals(v - m)[5], 2.0 - 5.0);
  const Tensor s = Tensor::scalar(2, DType::f64);
  EXPECT_EQ(vals(s / v), (std::vector<double>{2, 1, 2.0 / 3, 0.5}));
  EXPECT_EQ(vals(v / s), (std::vector<double>{0.5, 1, 1.5, 2}));
  EXPECT_EQ((s * s).dim(), 0);
  // gradient of a broadcast operand is summed over the broadcast dims
  Tensor c = col.clone().requires_grad_(), r = row.clone().requires_grad_();
  sum(c * r).backward();
  EXPECT_EQ(vals(c.grad()), (std::vector<double>{100, 100, 100}));
  EXPECT_EQ(vals(r.grad()), (std::vector<double>{6, 6, 6, 6}));
  EXPECT_EQ(c.grad().shape(), (Shape{3, 1}));
}

TEST(Binary, DoubleOnEitherSide) {
  Tensor x = f64({1, 2, 4}, {3}).requires_grad_();
  EXPECT_EQ(vals(x + 1.0), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(1.0 + x), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ(vals(x - 1.0), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ(vals(1.0 - x), (std::vector<double>{0, -1, -3}));
  EXPECT_EQ(vals(x * 3.0), (std::vector<double>{3, 6, 12}));
  EXPECT_EQ(vals(3.0 * x), (std::vector<double>{3, 6, 12}));
  EXPECT_EQ(vals(x / 2.0), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(vals(2.0 / x), (std::vector<double>{2, 1, 0.5}));
  sum(2.0 / x).backward();  // -2 / x²
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{-2, -0.5, -0.125}));
  x.zero_grad();
  sum(1.0 - x * 3.0).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{-3, -3, -3}));
  // the double takes the tensor's dtype
  EXPECT_EQ((Tensor::ones({2}) * 0.1).dtype(), DType::f32);
  EXPECT_EQ(vals(Tensor::ones({1}) * 0.1)[0], static_cast<double>(0.1f));
  for (auto op : {+[](const Tensor& t) { return t + 1.5; }, +[](const Tensor& t) { return 1.5 - t; },
                  +[](const Tensor& t) { return t * 1.5; }, +[](const Tensor& t) { return 1.5 / t; }})
    expect_gradcheck([op](const std::vector<Tensor>& in) { return op(in[0]); }, {away_from_zero({2, 3}, 41)});
}

TEST(Binary, NonContiguousInputs) {
  Tensor a = transposed_leaf({3, 4}, 51, 0.3, 2.0), b = transposed_leaf({3, 4}, 52);
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    Tensor bb = c.nonzero_b ? away_from_zero({4, 3}, 53).detach().transpose(0, 1).detach().requires_grad_() : b;
    EXPECT_EQ(vals(c.op(a, bb)), vals(c.op(a.contiguous(), bb.contiguous())));
    expect_gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, bb});
    // a strided row against a broadcast column, and an expanded (stride 0) operand
    Tensor row = a.detach().slice(1, 0, 4, 2);  // [3, 2]
    Tensor e = Tensor::from_list({1.5, 2.5}, {1, 2}, DType::f64).expand({3, 2});
    EXPECT_EQ(vals(c.op(row, e)), vals(c.op(row.contiguous(), e.contiguous())));
    EXPECT_EQ(vals(c.op(e, row)), vals(c.op(e.contiguous(), row.contiguous())));
  }
}

TEST(Binary, MulComputesOnlyNeededGradients) {
  Tensor a = f64({1, 2}, {2}).requires_grad_(), b = f64({3, 4}, {2});
  sum(a * b).backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{3, 4}));
  EXPECT_FALSE(b.grad().defined());
  sum(b * a).backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{6, 8}));
}

TEST(Pow, TensorAndScalarExponents) {
  Tensor x = f64({0.5, 1, 2, 3}, {4}).requires_grad_();
  EXPECT_EQ(vals(pow(x, 2.0)), (std::vector<double>{0.25, 1, 4, 9}));
  expect_near_all(vals(pow(x, -1.5)), {std::pow(0.5, -1.5), 1, std::pow(2, -1.5), std::pow(3, -1.5)});
  EXPECT_EQ(vals(pow(x, 0.0)), std::vector<double>(4, 1.0));
  sum(pow(x, 3.0)).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0.75, 3, 12, 27}));
  x.zero_grad();
  sum(pow(x, 0.0)).backward();
  EXPECT_EQ(vals(x.grad()), std::vector<double>(4, 0.0));
  for (double p : {2.0, 3.0, -1.5, 0.5, 1.0}) {
    SCOPED_TRACE(p);
    expect_gradcheck([p](const std::vector<Tensor>& in) { return pow(in[0], p); }, {uniform_leaf({2, 3}, 61, 0.3, 2.0)});
  }
  // integer powers of negative bases are fine
  expect_gradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 3.0); }, {uniform_leaf({5}, 62, -2, -0.3)});
}

TEST(Pow, ZeroBaseConventionsMatchPyTorch) {
  // torch.pow(a, b) with a = [0, 0, 2, -2], b = [2, 0, -1.5, 3]: values and both gradients.
  Tensor a = f64({0, 0, 2, -2}, {4}).requires_grad_(), b = f64({2, 0, -1.5, 3}, {4}).requires_grad_();
  Tensor y = pow(a, b);
  expect_near_all(vals(y), {0, 1, 0.3535533905932738, -8});
  sum(y).backward();
  expect_near_all(vals(a.grad()), {0, 0, -0.26516504294495535, 12});
  const std::vector<double> gb = vals(b.grad());
  expect_near_all({gb[0], gb[1], gb[2]}, {0, 0, 0.2450645358671368});
  EXPECT_TRUE(std::isnan(gb[3]));  // log of a negative base
}

TEST(Binary, Errors) {
  const Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  for (const BinaryCase& c : binary_cases()) {
    SCOPED_TRACE(c.name);
    expect_error<ShapeError>([&] { c.op(a, b); }, {c.name, "[2, 3]", "[4]", "broadcast"});
    expect_error<DTypeError>([&] { c.op(a, Tensor::zeros({2, 3}, DType::f64)); }, {c.name, "f32", "f64"});
    expect_error<DTypeError>([&] { c.op(Tensor::zeros({2}, DType::i64), Tensor::zeros({2}, DType::i64)); },
                             {c.name, "i64"});
  }
  expect_error<ShapeError>([&] { a + Tensor::zeros({3, 2}); }, {"add", "[2, 3]", "[3, 2]"});
}

// ---- where, masked_fill, comparisons ---------------------------------------------------------------

TEST(Where, BroadcastValuesAndGradients) {
  const Tensor cond = Tensor::from_vector(std::vector<bool>{true, false, true, false}, {1, 4});
  Tensor a = f64({1, 2, 3}, {3, 1}).requires_grad_();
  Tensor b = Tensor::scalar(-1, DType::f64).requires_grad_();
  Tensor y = where(cond, a, b);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(vals(y), (std::vector<double>{1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1}));
  sum(y).backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_EQ(b.grad().item(), 6.0);
  // cond can be the broadcast one too
  const Tensor c2 = Tensor::from_vector(std::vector<bool>{false, true}, {2, 1});
  Tensor full_a = uniform_leaf({2, 3}, 71), full_b = uniform_leaf({3}, 72);
  expect_gradcheck([&](const std::vector<Tensor>& in) { return where(c2, in[0], in[1]); }, {full_a, full_b});
  expect_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
  // strided operands
  Tensor ta = transposed_leaf({4, 3}, 73);
  const Tensor c3 = Tensor::from_vector(std::vector<bool>{true, false, false}, {3});
  EXPECT_EQ(vals(where(c3, ta, full_b)), vals(where(c3, ta.contiguous(), full_b)));
  expect_gradcheck([&](const std::vector<Tensor>& in) { return where(c3, in[0], in[1]); }, {ta, full_b});
}

TEST(Where, Errors) {
  const Tensor a = Tensor::zeros({2}), b = Tensor::ones({2});
  expect_error<DTypeError>([&] { where(Tensor::ones({2}), a, b); }, {"where", "b8", "f32"});
  expect_error<DTypeError>([&] { where(Tensor::ones({2}, DType::i64), a, b); }, {"where", "i64"});
  const Tensor m = Tensor::from_vector(std::vector<bool>{true, false}, {2});
  expect_error<DTypeError>([&] { where(m, a, Tensor::ones({2}, DType::f64)); }, {"where", "f32", "f64"});
  expect_error<ShapeError>([&] { where(m, a, Tensor::ones({3})); }, {"where", "[3]"});
  expect_error<ShapeError>([&] { where(Tensor::zeros({3}, DType::b8), a, b); }, {"where", "[3]", "[2]"});
}

TEST(MaskedFill, BroadcastMaskValuesAndGradient) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  const Tensor row_mask = Tensor::from_vector(std::vector<bool>{false, true, false}, {3});
  const Tensor col_mask = Tensor::from_vector(std::vector<bool>{true, false}, {2, 1});
  EXPECT_EQ(vals(masked_fill(x, row_mask, -INFINITY))[1], -INFINITY);
  EXPECT_EQ(vals(masked_fill(x, row_mask, 0.5)), (std::vector<double>{1, 0.5, 3, 4, 0.5, 6}));
  EXPECT_EQ(vals(masked_fill(x, col_mask, 9)), (std::vector<double>{9, 9, 9, 4, 5, 6}));
  sum(masked_fill(x, col_mask, 9) * 2.0).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0, 0, 2, 2, 2}));
  expect_gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], row_mask, 7.0); }, {uniform_leaf({2, 3}, 81)});
  expect_gradcheck([&](const std::vector<Tensor>& in) { return masked_fill(in[0], col_mask, 7.0); },
                   {transposed_leaf({2, 3}, 82)});
  // an expanded (stride-0) mask
  const Tensor em = Tensor::from_vector(std::vector<bool>{true}, {1}).expand({2, 3});
  EXPECT_EQ(vals(masked_fill(x, em, 0)), std::vector<double>(6, 0.0));
}

TEST(MaskedFill, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error<DTypeError>([&] { masked_fill(x, Tensor::ones({3}), 0); }, {"masked_fill", "b8", "f32", "[3]"});
  expect_error<DTypeError>([&] { masked_fill(x, Tensor::ones({3}, DType::i64), 0); }, {"masked_fill", "i64"});
  // the mask must broadcast to x's shape, not x to the mask's
  expect_error<ShapeError>([&] { masked_fill(x, Tensor::zeros({4, 2, 3}, DType::b8), 0); },
                           {"masked_fill", "[4, 2, 3]", "[2, 3]"});
  expect_error<ShapeError>([&] { masked_fill(x, Tensor::zeros({2}, DType::b8), 0); }, {"masked_fill", "[2]", "[2, 3]"});
}

TEST(Compare, ValuesAndNoGradient) {
  Tensor a = f64({1, 2, 3}, {3}).requires_grad_();
  const Tensor b = f64({2}, {1});
  EXPECT_EQ(eq(a, b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(gt(a, b).to_vector<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(lt(a, b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(gt(a, b).dtype(), DType::b8);
  EXPECT_FALSE(gt(a, b).requires_grad());
  EXPECT_EQ(logical_not(gt(a, b)).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  const Tensor i = Tensor::from_list({1, 5}, {2, 1}, DType::i64), j = Tensor::from_list({1, 4, 6}, {3}, DType::i64);
  EXPECT_EQ(eq(i, j).shape(), (Shape{2, 3}));
  EXPECT_EQ(gt(i, j).to_vector<bool>(), (std::vector<bool>{false, false, false, true, true, false}));
  expect_error<DTypeError>([&] { eq(a, i); }, {"eq", "f64", "i64"});
  expect_error<DTypeError>([&] { logical_not(a); }, {"logical_not", "b8"});
}

// ---- sum_to, add_ --------------------------------------------------------------------------------

TEST(SumTo, ValuesAndErrors) {
  const Tensor x = Tensor::arange(0, 24, 1, DType::f64).reshape({2, 3, 4});
  EXPECT_TRUE(sum_to(x, {2, 3, 4}).is_same(x));  // nothing to do: the same tensor
  EXPECT_EQ(vals(sum_to(x, {4})), (std::vector<double>{60, 66, 72, 78}));
  EXPECT_EQ(vals(sum_to(x, {3, 1})), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(sum_to(x, {1, 3, 1}).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(sum_to(x, {}).item(), 276.0);
  expect_gradcheck([](const std::vector<Tensor>& in) { return sum_to(in[0], {3, 1}); }, {uniform_leaf({2, 3, 4}, 91)});
  expect_error<ShapeError>([&] { sum_to(x, {2, 2, 3, 4}); }, {"sum_to", "[2, 3, 4]", "[2, 2, 3, 4]"});
  expect_error<ShapeError>([&] { sum_to(x, {2, 4}); }, {"sum_to", "[2, 3, 4]", "[2, 4]"});
}

TEST(AddInPlace, AccumulatesBroadcastsAndIsNotRecorded) {
  Tensor acc = f64({1, 2, 3, 4}, {2, 2});
  add_(acc, f64({10, 20, 30, 40}, {2, 2}));
  EXPECT_EQ(vals(acc), (std::vector<double>{11, 22, 33, 44}));
  add_(acc, f64({1, 2}, {2}));  // broadcast
  EXPECT_EQ(vals(acc), (std::vector<double>{12, 24, 34, 46}));
  // into a strided view: writes through to the base
  Tensor base = Tensor::zeros({2, 2}, DType::f64);
  Tensor t = base.transpose(0, 1);
  add_(t, f64({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(vals(base), (std::vector<double>{1, 3, 2, 4}));
  Tensor g = f64({1, 1}, {2}).requires_grad_();
  Tensor p = Tensor::zeros({2}, DType::f64);
  add_(p, g);
  EXPECT_FALSE(p.requires_grad());
  EXPECT_EQ(p.grad_fn(), nullptr);
  expect_error<ShapeError>([&] { add_(p, Tensor::zeros({3, 2}, DType::f64)); }, {"add_", "[3, 2]", "[2]"});
  expect_error<DTypeError>([&] { add_(p, Tensor::zeros({2})); }, {"add_", "f64", "f32"});
}
