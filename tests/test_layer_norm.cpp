// layer_norm: values, fused vs composite, gradients of x, weight and bias.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/ops/layer_norm.h>
#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

}  // namespace

TEST(LayerNorm, HandComputed) {
  // [1, 2, 3, 4]: mean 2.5, biased var 1.25
  Tensor x = Tensor::from_list({1, 2, 3, 4}, {1, 4}, DType::f64);
  const double rs = 1 / std::sqrt(1.25 + 1e-5);
  expect_near_all(layer_norm(x, {4}).to_vector<double>(), {-1.5 * rs, -0.5 * rs, 0.5 * rs, 1.5 * rs}, 1e-15);
  // eps matters: eps = 0.75 gives var + eps = 2
  expect_near_all(layer_norm(x, {4}, {}, {}, 0.75).to_vector<double>(),
                  {-1.5 / std::sqrt(2.0), -0.5 / std::sqrt(2.0), 0.5 / std::sqrt(2.0), 1.5 / std::sqrt(2.0)}, 1e-15);
}

TEST(LayerNorm, MatchesPyTorchNumbers) {
  // F.layer_norm(x, [4], w, b) in float64
  Tensor x = Tensor::from_list({1, 2, 4, 7, 0.5, -0.5, 0.25, 3}, {2, 4}, DType::f64);
  Tensor w = Tensor::from_list({1, 0.5, -2, 3}, {4}, DType::f64), b = Tensor::from_list({0, 1, 0.5, -1}, {4}, DType::f64);
  const std::vector<double> want = {-1.0910884120486357, 0.6726734763854092, 0.06356463518054589, 3.5825713306042695,
                                    -0.23755648268033275, 0.5011313863713012, 1.3552033376491979, 3.988686136286988};
  expect_near_all(layer_norm(x, {4}, w, b).to_vector<double>(), want, 1e-14);
  expect_near_all(layer_norm(x.to(DType::f32), {4}, w.to(DType::f32), b.to(DType::f32)).to_vector<double>(), want, 1e-5);
}

TEST(LayerNorm, ConstantRowGivesBias) {
  Tensor x = Tensor::full({2, 3}, 5.0, DType::f32).requires_grad_();
  Tensor b = Tensor::from_list({1, 2, 3}, {3});
  Tensor y = layer_norm(x, {3}, Tensor::ones({3}), b);
  expect_near_all(y.to_vector<double>(), {1, 2, 3, 1, 2, 3}, 0);
  sum(y * Tensor::from_list({1, -2, 4}, {3})).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(LayerNorm, FusedAndCompositeAgree) {
  struct Case { Shape x; Shape ns; bool w, b; };
  for (const Case& c : {Case{{2, 3, 4}, {4}, true, true}, Case{{2, 3, 4}, {3, 4}, true, true},
                        Case{{5, 6}, {6}, false, false}, Case{{5, 6}, {6}, true, false}, Case{{5, 6}, {6}, false, true}}) {
    for (DType dt : {DType::f64, DType::f32}) {
      const double tol = dt == DType::f64 ? 1e-12 : 1e-4;
      Tensor xa = randn(c.x, 1, dt).requires_grad_(), xb = xa.detach().clone().requires_grad_();
      Tensor wa = c.w ? randn(c.ns, 2, dt).requires_grad_() : Tensor(), wb = c.w ? wa.detach().clone().requires_grad_() : Tensor();
      Tensor ba = c.b ? randn(c.ns, 3, dt).requires_grad_() : Tensor(), bb = c.b ? ba.detach().clone().requires_grad_() : Tensor();
      Tensor ya = layer_norm(xa, c.ns, wa, ba), yb = layer_norm_composite(xb, c.ns, wb, bb);
      expect_near_all(ya.to_vector<double>(), yb.to_vector<double>(), tol);
      Tensor g = randn(c.x, 4, dt);
      ya.backward(g);
      yb.backward(g);
      expect_near_all(xa.grad().to_vector<double>(), xb.grad().to_vector<double>(), tol);
      if (c.w) expect_near_all(wa.grad().to_vector<double>(), wb.grad().to_vector<double>(), tol);
      if (c.b) expect_near_all(ba.grad().to_vector<double>(), bb.grad().to_vector<double>(), tol);
    }
  }
}

TEST(LayerNorm, GradcheckAllInputs) {
  auto fn = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]); };
  auto r = gradcheck(fn, {randn({2, 3, 4}, 10).requires_grad_(), randn({4}, 11).requires_grad_(),
                          randn({4}, 12).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
  // Only weight and bias.
  r = gradcheck(fn, {randn({3, 4}, 13), randn({4}, 14).requires_grad_(), randn({4}, 15).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
  // The composite twin too.
  r = gradcheck([](const std::vector<Tensor>& in) { return layer_norm_composite(in[0], {4}, in[1], in[2]); },
                {randn({2, 4}, 16).requires_grad_(), randn({4}, 17).requires_grad_(), randn({4}, 18).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(LayerNorm, GradcheckMultiDimAndNoAffine) {
  auto r = gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}, in[1], in[2], 0.1); },
                     {randn({2, 2, 3}, 20).requires_grad_(), randn({2, 3}, 21).requires_grad_(),
                      randn({2, 3}, 22).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
  r = gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}); }, {randn({3, 5}, 23).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(LayerNorm, GradcheckNonContiguous) {
  Tensor x = randn({4, 3}, 30).transpose(0, 1).requires_grad_();  // [3, 4], non-contiguous leaf
  Tensor w = randn({8}, 31).slice(0, 0, 8, 2).requires_grad_();    // [4], stride 2
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  // The transpose after the op hands layer_norm a non-contiguous grad.
  auto r = gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {4}, in[1], in[2]).transpose(0, 1); },
                     {x, w, randn({4}, 32).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(LayerNorm, OneDimInput) {
  Tensor x = Tensor::from_list({3, 5}, {2}, DType::f64);
  const double rs = 1 / std::sqrt(1 + 1e-5);
  expect_near_all(layer_norm(x, {2}).to_vector<double>(), {-rs, rs}, 1e-15);
}

TEST(LayerNorm, Errors) {
  Tensor x = Tensor::zeros({2, 3});
  expect_error<ShapeError>([&] { layer_norm(x, {4}); }, {"layer_norm", "[2, 3]", "[4]"});
  expect_error<ShapeError>([&] { layer_norm(x, {2, 2, 3}); }, {"layer_norm", "[2, 3]", "[2, 2, 3]"});
  expect_error<ShapeError>([&] { layer_norm(x, {}); }, {"layer_norm", "normalized_shape"});
  expect_error<ShapeError>([&] { layer_norm(x, {3}, Tensor::ones({4})); }, {"layer_norm", "weight", "[4]", "[3]"});
  expect_error<ShapeError>([&] { layer_norm(x, {3}, {}, Tensor::ones({2, 3})); }, {"layer_norm", "bias", "[2, 3]"});
  expect_error<DTypeError>([&] { layer_norm(x, {3}, Tensor::ones({3}, DType::f64)); }, {"layer_norm", "weight", "f64", "f32"});
  expect_error<DTypeError>([&] { layer_norm(Tensor::zeros({2, 3}, DType::i64), {3}); }, {"layer_norm", "i64"});
  expect_error<ValueError>([&] { layer_norm(x, {3}, {}, {}, -1.0); }, {"layer_norm", "eps"});
  expect_error<ShapeError>([&] { layer_norm_composite(x, {4}); }, {"layer_norm_composite", "[2, 3]", "[4]"});
}
