// Reductions: sum, mean, var, max, argmax over dims (negative, several, all),
// with and without keepdim; values against a naive reference, gradcheck,
// tie-breaking, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <attograd/autograd/autograd.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

enum class Red { sum, mean, var0, var1, max };

// Naive reference: groups elements by their index with the reduced dims
// dropped, then reduces each group. Returns (values, out shape).
std::pair<std::vector<double>, Shape> reference(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                                                Red op) {
  const Shape& s = x.shape();
  std::vector<bool> red(s.size(), false);
  for (int64_t d : dims) red[d < 0 ? d + static_cast<int64_t>(s.size()) : d] = true;
  Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (!red[d]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  std::map<std::vector<int64_t>, std::vector<double>> groups;
  const std::vector<double> v = vals(x);
  std::vector<int64_t> idx(s.size(), 0);
  for (double e : v) {
    std::vector<int64_t> key;
    for (size_t d = 0; d < s.size(); ++d)
      if (!red[d]) key.push_back(idx[d]);
    groups[key].push_back(e);
    for (size_t d = s.size(); d-- > 0;)
      if (++idx[d] < s[d]) break;
      else idx[d] = 0;
  }
  std::vector<double> res;
  for (auto& [key, g] : groups) {  // std::map orders keys row-major
    double acc = 0, m = 0, ss = 0, mx = -INFINITY;
    for (double e : g) acc += e, mx = std::max(mx, e);
    m = acc / static_cast<double>(g.size());
    for (double e : g) ss += (e - m) * (e - m);
    const double n = static_cast<double>(g.size());
    res.push_back(op == Red::sum ? acc : op == Red::mean ? m : op == Red::var0 ? ss / n : op == Red::var1 ? ss / (n - 1) : mx);
  }
  return {res, out};
}

Tensor apply(Red op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  switch (op) {
    case Red::sum: return sum(x, dims, keepdim);
    case Red::mean: return mean(x, dims, keepdim);
    case Red::var0: return var(x, dims, 0, keepdim);
    case Red::var1: return var(x, dims, 1, keepdim);
    case Red::max: return max(x, dims.at(0), keepdim).values;
  }
  return {};
}

const char* name_of(Red op) {
  switch (op) {
    case Red::sum: return "sum";
    case Red::mean: return "mean";
    case Red::var0: case Red::var1: return "var";
    case Red::max: return "max";
  }
  return "";
}

}  // namespace

TEST(Reduce, MatchesReferenceOverDimLists) {
  const Tensor x = randn_leaf({2, 3, 4}, 1);
  const std::vector<std::vector<int64_t>> dim_lists = {{0}, {1}, {2}, {-1}, {-3}, {0, 2}, {2, 0}, {-1, 1}, {0, 1, 2}};
  for (Red op : {Red::sum, Red::mean, Red::var0, Red::var1, Red::max}) {
    for (const auto& dims : dim_lists) {
      if (op == Red::max && dims.size() != 1) continue;
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(fmt::format("{} dims {} keepdim {}", name_of(op), shape_str(dims), keepdim));
        const auto [want, shape] = reference(x, dims, keepdim, op);
        const Tensor y = apply(op, x, dims, keepdim);
        EXPECT_EQ(y.shape(), shape);
        expect_near_all(vals(y), want);
        EXPECT_EQ(y.grad_fn_name(), name_of(op));
        expect_gradcheck([op, dims, keepdim](const std::vector<Tensor>& in) { return apply(op, in[0], dims, keepdim); },
                         {x});
      }
    }
  }
}

TEST(Reduce, NonContiguousInput) {
  const Tensor x = randn_leaf({4, 3}, 2).detach().transpose(0, 1).detach().requires_grad_();  // [3, 4] strided
  for (Red op : {Red::sum, Red::mean, Red::var1, Red::max}) {
    for (int64_t d : {0, 1}) {
      SCOPED_TRACE(fmt::format("{} dim {}", name_of(op), d));
      expect_near_all(vals(apply(op, x, {d}, false)), reference(x, {d}, false, op).first);
      expect_gradcheck([op, d](const std::vector<Tensor>& in) { return apply(op, in[0], {d}, true); }, {x});
    }
  }
}

TEST(Reduce, FullReductions) {
  const Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(x).dim(), 0);
  EXPECT_EQ(sum(x).item(), 21.0);
  EXPECT_EQ(mean(x).item(), 3.5);
  EXPECT_DOUBLE_EQ(var(x).item(), 3.5);        // Σ(x - 3.5)² = 17.5, / 5
  EXPECT_DOUBLE_EQ(var(x, {0, 1}, 0).item(), 17.5 / 6);  // population variance
  EXPECT_EQ(max(x).item(), 6.0);
  EXPECT_EQ(max(x).dim(), 0);
  const Tensor s = Tensor::scalar(3, DType::f64);
  EXPECT_EQ(sum(s).item(), 3.0);
  EXPECT_EQ(mean(s).item(), 3.0);
  EXPECT_EQ(max(s).item(), 3.0);
  EXPECT_EQ(sum(x, {0, 1}, true).shape(), (Shape{1, 1}));
  Tensor l = randn_leaf({3, 4}, 3);
  for (auto fn : {+[](const Tensor& t) { return sum(t); }, +[](const Tensor& t) { return mean(t); },
                  +[](const Tensor& t) { return var(t); }, +[](const Tensor& t) { return max(t); }})
    expect_gradcheck([fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {l});
  // sums accumulate in double: 1e6 f32 ones is exact
  EXPECT_EQ(sum(Tensor::ones({1000000})).item(), 1e6);
  EXPECT_EQ(sum(Tensor::ones({1000000}) * 0.1).dtype(), DType::f32);
}

TEST(Reduce, GradientValues) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  sum(x, {1}).backward(f64({10, 20}, {2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{10, 10, 10, 20, 20, 20}));
  x.zero_grad();
  mean(x, {0}).backward(f64({2, 4, 6}, {3}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  x.zero_grad();
  var(x, {1}, 1).backward(f64({1, 1}, {2}));  // 2 (x - x̄) / (N - 1), x̄ = 2, 5
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{-1, 0, 1, -1, 0, 1}));
}

TEST(Reduce, VarDegenerate) {
  const Tensor one = f64({5}, {1});
  EXPECT_TRUE(std::isnan(var(one).item()));  // N - correction = 0, as PyTorch
  EXPECT_EQ(var(one, {0}, 0).item(), 0.0);
}

TEST(Max, ValuesIndicesTiesAndNaN) {
  const Tensor x = f64({1, 7, 7, 2, 3, 9, 0, 9}, {2, 4});
  const MaxResult r = max(x, 1);
  EXPECT_EQ(vals(r.values), (std::vector<double>{7, 9}));
  EXPECT_EQ(r.indices.dtype(), DType::i64);
  EXPECT_EQ(r.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));  // first maximum
  const MaxResult k = max(x, 0, /*keepdim=*/true);
  EXPECT_EQ(k.values.shape(), (Shape{1, 4}));
  EXPECT_EQ(vals(k.values), (std::vector<double>{3, 9, 7, 9}));
  EXPECT_EQ(k.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_EQ(argmax(x, -1).to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(argmax(x, 0, true).shape(), (Shape{1, 4}));
  EXPECT_FALSE(argmax(x.clone().requires_grad_(), 0).requires_grad());
  const Tensor n = f64({1, NAN, 3}, {3});
  EXPECT_TRUE(std::isnan(max(n, 0).values.item()));  // NaN wins, as PyTorch
  EXPECT_EQ(argmax(n, 0).item(), 1.0);
  EXPECT_TRUE(std::isnan(max(n).item()));
}

TEST(Max, DimGradientGoesToTheReturnedIndex) {
  Tensor x = f64({1, 7, 7, 2, 3, 9, 0, 9}, {2, 4}).requires_grad_();
  max(x, 1).values.backward(f64({10, 20}, {2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 10, 0, 0, 0, 20, 0, 0}));
  x.zero_grad();
  max(x, 0, true).values.backward(f64({1, 2, 3, 4}, {1, 4}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{0, 0, 3, 0, 1, 2, 0, 4}));  // argmax per column: 1, 1, 0, 1
  // 3-d, middle dim, strided
  Tensor y = randn_leaf({4, 3, 2}, 5).detach().permute({2, 1, 0}).detach().requires_grad_();  // [2, 3, 4]
  expect_gradcheck([](const std::vector<Tensor>& in) { return max(in[0], 1).values; }, {y});
  expect_gradcheck([](const std::vector<Tensor>& in) { return max(in[0], -1, true).values; }, {y});
}

TEST(Max, FullMaxSharesGradientAmongTies) {
  // torch.max(x) with three tied maxima gives each a third (PyTorch's evenly distributed gradient).
  Tensor x = f64({5, 1, 5, 5, -2, 0}, {2, 3}).requires_grad_();
  Tensor m = max(x);
  EXPECT_EQ(m.item(), 5.0);
  (m * 3.0).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{1, 0, 1, 1, 0, 0}));
  Tensor u = f64({1, 4, 2}, {3}).requires_grad_();
  max(u).backward();
  EXPECT_EQ(vals(u.grad()), (std::vector<double>{0, 1, 0}));
}

TEST(Max, ZeroDimInput) {
  Tensor s = Tensor::scalar(2.5, DType::f64).requires_grad_();
  const MaxResult r = max(s, 0);
  EXPECT_EQ(r.values.item(), 2.5);
  EXPECT_EQ(r.indices.item(), 0.0);
  r.values.backward();
  EXPECT_EQ(s.grad().item(), 1.0);
  s.zero_grad();
  max(s).backward();
  EXPECT_EQ(s.grad().item(), 1.0);
}

TEST(Reduce, Errors) {
  const Tensor x = Tensor::zeros({2, 3});
  expect_error<IndexError>([&] { sum(x, {2}); }, {"sum", "dim 2", "2-d"});
  expect_error<IndexError>([&] { mean(x, {-3}); }, {"mean", "-3"});
  expect_error<IndexError>([&] { var(x, {5}); }, {"var", "5"});  // dim 5, not correction 5
  expect_error<IndexError>([&] { max(x, 2); }, {"max", "dim 2"});
  expect_error<IndexError>([&] { argmax(x, -3); }, {"argmax", "-3"});
  expect_error<IndexError>([&] { sum(x, {1, -1}); }, {"sum", "twice"});
  expect_error<ShapeError>([] { max(Tensor::zeros({2, 0}), 1); }, {"max", "empty", "[2, 0]"});
  expect_error<ShapeError>([] { max(Tensor::zeros({0})); }, {"max", "empty"});
  expect_error<DTypeError>([] { sum(Tensor::zeros({2}, DType::i64)); }, {"sum", "i64"});
}
