// Shape ops: values, which ones alias their input, gradcheck, and errors.
#include <gtest/gtest.h>

#include <attograd/autograd/autograd.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

}  // namespace

// ---- reshape / view ---------------------------------------------------------------------------

TEST(Reshape, ViewWhenContiguousCopyOtherwise) {
  const Tensor x = iota({2, 3, 4});
  Tensor r = x.reshape({4, -1});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  EXPECT_TRUE(r.shares_storage(x));
  EXPECT_EQ(vals(r), vals(x));
  EXPECT_EQ(x.reshape({-1}).shape(), (Shape{24}));
  EXPECT_EQ(x.reshape({2, -1, 2}).shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(x.flatten().shape(), (Shape{24}));
  EXPECT_EQ(Tensor::scalar(3).reshape({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(iota({1, 1}).reshape({}).dim(), 0);
  // a row range with an offset is still contiguous: a view at that offset
  Tensor rows = x.slice(0, 1, 2);
  Tensor rr = rows.reshape({3, 4});
  EXPECT_TRUE(rr.shares_storage(x));
  EXPECT_EQ(vals(rr), vals(rows));
  // non-contiguous: a copy in logical order
  Tensor t = x.transpose(1, 2);  // [2, 4, 3]
  Tensor tr = t.reshape({8, 3});
  EXPECT_FALSE(tr.shares_storage(x));
  EXPECT_EQ(vals(tr), vals(t));
  EXPECT_TRUE(tr.is_contiguous());
}

TEST(Reshape, ViewRefusesNonContiguous) {
  const Tensor x = iota({2, 3});
  Tensor v = x.view({3, 2});
  EXPECT_TRUE(v.shares_storage(x));
  EXPECT_EQ(vals(v), vals(x));
  EXPECT_EQ(x.view({-1}).shape(), (Shape{6}));
  expect_error<ShapeError>([&] { x.transpose(0, 1).view({6}); }, {"view", "[3, 2]", "strides", "reshape"});
  expect_error<ShapeError>([&] { x.slice(1, 0, 3, 2).view({4}); }, {"view", "contiguous"});
}

TEST(Reshape, Gradcheck) {
  Tensor x = randn_leaf({2, 3, 2}, 1);
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].reshape({3, -1}) * Tensor::arange(0, 4, 1, DType::f64); },
                   {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].view({6, 2}); }, {x});
  Tensor xt = randn_leaf({3, 4}, 2).detach().transpose(0, 1).detach().requires_grad_();
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].reshape({2, 6}); }, {xt});
  Tensor a = iota({2, 3}).requires_grad_();
  sum(a.reshape({3, 2}) * iota({3, 2})).backward();
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(Reshape, Errors) {
  const Tensor x = iota({2, 3});
  expect_error<ShapeError>([&] { x.reshape({4, 2}); }, {"reshape", "[4, 2]", "[2, 3]", "8", "6"});
  expect_error<ShapeError>([&] { x.reshape({-1, -1}); }, {"reshape", "one size may be -1"});
  expect_error<ShapeError>([&] { x.reshape({4, -1}); }, {"reshape", "-1", "6 elements"});
  expect_error<ShapeError>([&] { x.reshape({-2, 3}); }, {"reshape", "-2"});
  expect_error<ShapeError>([&] { x.view({5}); }, {"view", "[5]", "[2, 3]"});
}

// ---- transpose, permute, unsqueeze, squeeze -------------------------------------------------------

TEST(Transpose, ValuesAliasGradient) {
  const Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_TRUE(t.shares_storage(x));
  EXPECT_EQ(vals(t)[1], 12.0);  // t[0][0][1] = x[1][0][0]
  EXPECT_EQ(vals(x.transpose(-1, 0)), vals(t));
  EXPECT_EQ(vals(t.transpose(2, 0)), vals(x));
  EXPECT_TRUE(x.transpose(1, 1).is_same(x));
  EXPECT_EQ(Tensor::scalar(1).transpose(0, -1).dim(), 0);
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].transpose(0, 1) * iota({3, 2}); }, {randn_leaf({2, 3}, 3)});
  expect_error<IndexError>([&] { x.transpose(0, 3); }, {"transpose", "dim 3", "3-d"});
}

TEST(Permute, ValuesAliasGradient) {
  const Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_TRUE(p.shares_storage(x));
  const std::vector<double> pv = vals(p);
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(pv[(k * 2 + i) * 3 + j], static_cast<double>((i * 3 + j) * 4 + k));
  EXPECT_EQ(vals(x.permute({-1, 0, 1})), pv);
  EXPECT_EQ(vals(p.permute({1, 2, 0})), vals(x));  // the inverse permutation
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].permute({1, 2, 0}) * iota({3, 4, 2}); },
                   {randn_leaf({2, 3, 4}, 4)});
  expect_error<ShapeError>([&] { x.permute({0, 1}); }, {"permute", "2 dims", "3-d"});
  expect_error<IndexError>([&] { x.permute({0, 1, 1}); }, {"permute", "twice"});
  expect_error<IndexError>([&] { x.permute({0, 1, 3}); }, {"permute", "3"});
}

TEST(Squeeze, UnsqueezeAndSqueeze) {
  const Tensor x = iota({2, 3});
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(Tensor::scalar(1).unsqueeze(0).shape(), (Shape{1}));
  EXPECT_TRUE(x.unsqueeze(1).shares_storage(x));
  EXPECT_EQ(vals(x.unsqueeze(1)), vals(x));
  // unsqueeze of a strided view keeps reading the right elements
  Tensor t = x.transpose(0, 1).unsqueeze(1);  // [3, 1, 2]
  EXPECT_EQ(vals(t), vals(x.transpose(0, 1)));
  EXPECT_EQ(vals(t.expand({3, 2, 2})), (std::vector<double>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
  const Tensor y = iota({1, 3, 1, 2});
  EXPECT_EQ(y.squeeze().shape(), (Shape{3, 2}));
  EXPECT_EQ(y.squeeze(0).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(y.squeeze(-2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(y.squeeze(1).shape(), (Shape{1, 3, 1, 2}));  // size 3: no-op
  EXPECT_TRUE(y.squeeze().shares_storage(y));
  EXPECT_EQ(iota({1, 1}).squeeze().dim(), 0);
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].unsqueeze(1) * iota({2, 3, 4}); }, {randn_leaf({2, 4}, 5)});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].squeeze() * iota({3, 2}); }, {randn_leaf({1, 3, 1, 2}, 6)});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].squeeze(2); }, {randn_leaf({1, 3, 1, 2}, 7)});
  expect_error<IndexError>([&] { x.unsqueeze(3); }, {"unsqueeze", "3"});
  expect_error<IndexError>([&] { x.squeeze(2); }, {"squeeze", "2"});
}

// ---- expand ------------------------------------------------------------------------------------------

TEST(Expand, ValuesAliasGradient) {
  const Tensor x = Tensor::from_list({1, 2, 3}, {3, 1}, DType::f64);
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_TRUE(e.shares_storage(x));
  const std::vector<double> ev = vals(e);
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i], static_cast<double>((i / 4) % 3 + 1));
  EXPECT_EQ(x.expand({-1, 5}).shape(), (Shape{3, 5}));
  EXPECT_TRUE(x.expand({3, 1}).is_same(x));
  EXPECT_EQ(Tensor::scalar(7).expand({2, 2}).to_vector<float>(), std::vector<float>(4, 7));
  // gradient sums over the repeated dims
  Tensor l = x.clone().requires_grad_();
  sum(l.expand({2, 3, 4}) * iota({2, 3, 4})).backward();
  // l[i] collects Σ_{b,k} (b*12 + i*4 + k) = 2*(4i*4... ) computed directly:
  std::vector<double> want(3, 0.0);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k) want[i] += b * 12 + i * 4 + k;
  EXPECT_EQ(vals(l.grad()), want);
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].expand({2, 3, 4}) * iota({2, 3, 4}); }, {randn_leaf({3, 1}, 8)});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].expand({3, 2}) * iota({3, 2}); }, {randn_leaf({}, 9)});
}

TEST(Expand, Errors) {
  const Tensor x = iota({3, 2});
  expect_error<ShapeError>([&] { x.expand({3, 4}); }, {"expand", "[3, 2]", "[3, 4]", "not 1"});
  expect_error<ShapeError>([&] { x.expand({2}); }, {"expand", "fewer dims"});
  expect_error<ShapeError>([&] { x.expand({-1, 3, 2}); }, {"expand", "-1"});
  expect_error<ShapeError>([&] { iota({3, 1}).expand({3, -2}); }, {"expand", "-2"});
}

// ---- slice, narrow ---------------------------------------------------------------------------------------

TEST(Slice, StepsNegativeIndicesClamping) {
  const Tensor x = iota({10});
  EXPECT_EQ(vals(x.slice(0, 2, 5)), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(vals(x.slice(0, 1, 10, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(vals(x.slice(0, 0, 10, 4)), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(vals(x.slice(0, -3, 10)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(vals(x.slice(0, -4, -1)), (std::vector<double>{6, 7, 8}));
  EXPECT_EQ(vals(x.slice(0, 8, 100)), (std::vector<double>{8, 9}));      // end clamps
  EXPECT_EQ(vals(x.slice(0, -100, 2)), (std::vector<double>{0, 1}));     // start clamps
  EXPECT_EQ(x.slice(0, 5, 3).numel(), 0);                                 // empty, as Python
  EXPECT_EQ(x.slice(0, 12, 20).numel(), 0);
  const Tensor m = iota({3, 4});
  Tensor c = m.slice(1, 1, 4, 2);  // columns 1, 3
  EXPECT_EQ(c.shape(), (Shape{3, 2}));
  EXPECT_EQ(vals(c), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  EXPECT_TRUE(c.shares_storage(m));
  EXPECT_EQ(vals(m.slice(-1, -1, 4)), (std::vector<double>{3, 7, 11}));
  // slicing a slice
  EXPECT_EQ(vals(x.slice(0, 1, 10, 2).slice(0, 1, 5, 2)), (std::vector<double>{3, 7}));
}

TEST(Slice, GradientAndNarrow) {
  Tensor x = iota({3, 5}).requires_grad_();
  sum(x.slice(1, 0, 5, 2) * 2.0).backward();
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 0, 2, 0, 2, 2, 0, 2, 0, 2, 2, 0, 2, 0, 2}));
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].slice(1, 1, 5, 3) * iota({3, 2}); }, {randn_leaf({3, 5}, 10)});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].slice(0, -2, 3); }, {randn_leaf({3, 5}, 11)});
  // both pieces of one tensor used: gradients meet in the base
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].slice(1, 0, 2) * in[0].slice(1, 3, 5); },
                   {randn_leaf({3, 5}, 12)});
  const Tensor m = iota({4, 3});
  Tensor n = m.narrow(0, 1, 2);
  EXPECT_EQ(vals(n), (std::vector<double>{3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(n.shares_storage(m));
  EXPECT_EQ(vals(m.narrow(-1, 2, 1)), (std::vector<double>{2, 5, 8, 11}));
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].narrow(1, 1, 2); }, {randn_leaf({4, 3}, 13)});
}

TEST(Slice, Errors) {
  const Tensor x = iota({3, 4});
  expect_error<ValueError>([&] { x.slice(0, 0, 3, 0); }, {"slice", "step"});
  expect_error<ValueError>([&] { x.slice(0, 3, 0, -1); }, {"slice", "step"});
  expect_error<IndexError>([&] { x.slice(2, 0, 1); }, {"slice", "dim 2"});
  expect_error<IndexError>([&] { x.narrow(0, 2, 2); }, {"narrow", "[2, 4)", "size 3"});
  expect_error<IndexError>([&] { x.narrow(1, -1, 2); }, {"narrow"});
  expect_error<IndexError>([] { Tensor::scalar(1).slice(0, 0, 1); }, {"slice", "0-d"});
  expect_error<IndexError>([] { Tensor::scalar(1).narrow(0, 0, 1); }, {"narrow", "0-d"});
}

// ---- cat, stack ----------------------------------------------------------------------------------------------

TEST(Cat, ValuesCopyGradient) {
  const Tensor a = iota({2, 2}), b = iota({2, 3}) + 10.0;
  Tensor c = cat({a, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 5}));
  EXPECT_EQ(vals(c), (std::vector<double>{0, 1, 10, 11, 12, 2, 3, 13, 14, 15}));
  EXPECT_FALSE(c.shares_storage(a));
  EXPECT_EQ(vals(cat({a, a.transpose(0, 1)}, 0)), (std::vector<double>{0, 1, 2, 3, 0, 2, 1, 3}));
  EXPECT_EQ(vals(cat({a, b}, -1)), vals(c));
  EXPECT_EQ(vals(cat({a}, 0)), vals(a));
  EXPECT_EQ(cat({Tensor::ones({2}, DType::i64), Tensor::zeros({1}, DType::i64)}, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 0}));
  Tensor x = randn_leaf({2, 2}, 14), y = randn_leaf({2, 3}, 15);
  Tensor z = Tensor::ones({2, 1}, DType::f64);  // does not require grad
  expect_gradcheck([&](const std::vector<Tensor>& in) { return cat({in[0], z, in[1]}, 1) * iota({2, 6}); }, {x, y});
  expect_gradcheck([](const std::vector<Tensor>& in) { return cat({in[0], in[0]}, 0); }, {x});  // x twice
  Tensor xt = randn_leaf({3, 2}, 16).detach().transpose(0, 1).detach().requires_grad_();
  expect_gradcheck([&](const std::vector<Tensor>& in) { return cat({in[1], in[0]}, 1); }, {xt, y});
}

TEST(Cat, Errors) {
  const Tensor a = iota({2, 2});
  expect_error<ShapeError>([&] { cat({a, iota({3, 3})}, 1); }, {"cat", "tensor 1", "[3, 3]", "[2, 2]"});
  expect_error<ShapeError>([&] { cat({a, iota({2})}, 0); }, {"cat", "[2]"});
  expect_error<DTypeError>([&] { cat({a, Tensor::zeros({2, 2})}, 0); }, {"cat", "f32", "f64"});
  expect_error<ValueError>([] { cat({}, 0); }, {"cat", "at least one"});
  expect_error<IndexError>([&] { cat({a, a}, 2); }, {"cat", "dim 2"});
  expect_error<ShapeError>([] { cat({Tensor::scalar(1), Tensor::scalar(2)}, 0); }, {"cat", "0-d", "stack"});
}

TEST(Stack, ValuesGradientErrors) {
  const Tensor a = iota({2, 3}), b = iota({2, 3}) * -1.0;
  Tensor s0 = stack({a, b}, 0);
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(vals(s0), (std::vector<double>{0, 1, 2, 3, 4, 5, 0, -1, -2, -3, -4, -5}));
  Tensor s2 = stack({a, b}, -1);
  EXPECT_EQ(s2.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(vals(s2), (std::vector<double>{0, 0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5}));
  EXPECT_EQ(vals(stack({Tensor::scalar(1, DType::f64), Tensor::scalar(2, DType::f64)}, 0)), (std::vector<double>{1, 2}));
  expect_gradcheck([](const std::vector<Tensor>& in) { return stack({in[0], in[1], in[0]}, 1) * iota({2, 3, 3}); },
                   {randn_leaf({2, 3}, 17), randn_leaf({2, 3}, 18)});
  expect_error<ShapeError>([&] { stack({a, iota({3, 2})}, 0); }, {"stack", "tensor 1", "[3, 2]", "[2, 3]"});
  expect_error<ValueError>([] { stack({}, 0); }, {"stack"});
  expect_error<IndexError>([&] { stack({a, b}, 3); }, {"stack", "3"});
}

// ---- split, chunk ---------------------------------------------------------------------------------------

TEST(Split, PiecesAreViews) {
  const Tensor x = iota({7, 2});
  std::vector<Tensor> p = split(x, 3, 0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(p[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(vals(p[1]), (std::vector<double>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(vals(p[2]), (std::vector<double>{12, 13}));
  for (const Tensor& t : p) EXPECT_TRUE(t.shares_storage(x));
  std::vector<Tensor> cols = split(x, 1, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(vals(cols[1]), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));
  EXPECT_EQ(split(x, 10, 0).size(), 1u);
  // gradients of the pieces land in the right rows
  Tensor l = iota({7, 2}).requires_grad_();
  std::vector<Tensor> q = split(l, 3, 0);
  sum(q[0] * 1.0 + 0.0).backward();
  sum(q[2] * 5.0).backward();
  EXPECT_EQ(vals(l.grad()), (std::vector<double>{1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 5, 5}));
  expect_gradcheck([](const std::vector<Tensor>& in) {
    std::vector<Tensor> s = split(in[0], 2, 1);
    return s[0] * s[1] + s[2].expand({3, 2});
  }, {randn_leaf({3, 5}, 19)});
  expect_error<ValueError>([&] { split(x, 0, 0); }, {"split", "positive"});
  expect_error<IndexError>([&] { split(x, 1, 2); }, {"split", "dim 2"});
  expect_error<IndexError>([] { split(Tensor::scalar(1), 1, 0); }, {"split", "0-d"});
}

TEST(Chunk, PyTorchSizes) {
  const Tensor x = iota({10});
  std::vector<Tensor> c = chunk(x, 3, 0);  // ceil(10 / 3) = 4: sizes 4, 4, 2
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].numel(), 4);
  EXPECT_EQ(c[2].numel(), 2);
  EXPECT_EQ(vals(c[1]), (std::vector<double>{4, 5, 6, 7}));
  EXPECT_TRUE(c[1].shares_storage(x));
  EXPECT_EQ(chunk(iota({6}), 4, 0).size(), 3u);  // ceil(6/4) = 2: three pieces, as PyTorch
  EXPECT_EQ(chunk(iota({2}), 5, 0).size(), 2u);
  std::vector<Tensor> h = chunk(iota({2, 6}), 2, 1);
  EXPECT_EQ(vals(h[1]), (std::vector<double>{3, 4, 5, 9, 10, 11}));
  expect_gradcheck([](const std::vector<Tensor>& in) {
    std::vector<Tensor> s = chunk(in[0], 2, -1);
    return s[0] - s[1] * 2.0;
  }, {randn_leaf({2, 6}, 20)});
  expect_error<ValueError>([&] { chunk(x, 0, 0); }, {"chunk", "positive"});
  expect_error<IndexError>([] { chunk(Tensor::scalar(1), 1, 0); }, {"chunk", "0-d"});
}

// ---- clone / contiguous / to as graph ops ----------------------------------------------------------------

TEST(Copies, AreDifferentiable) {
  Tensor x = randn_leaf({3, 2}, 21).detach().transpose(0, 1).detach().requires_grad_();
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].contiguous() * iota({2, 3}); }, {x});
  expect_gradcheck([](const std::vector<Tensor>& in) { return in[0].clone() * iota({2, 3}); }, {x});
  EXPECT_EQ(x.clone().grad_fn_name(), "clone");
  EXPECT_EQ(x.contiguous().grad_fn_name(), "clone");
  EXPECT_EQ(x.transpose(0, 1).grad_fn_name(), "transpose");
  EXPECT_EQ(x.reshape({6}).grad_fn_name(), "reshape");
}
