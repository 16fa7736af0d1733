// A user-written custom Function, end to end: the RMSNorm of
// examples/custom_layer. Its hand-derived backward passes gradcheck (batch
// dims, non-contiguous input, one input at a time, as a Module parameter);
// the deliberately buggy variant fails with a report that names input 0 and
// its worst element; forward and backward equal the composite twin and
// hand-computed values; bad calls throw errors naming the op and shapes.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>
#include "examples/custom_layer/rmsnorm.h"
#include "test_util.h"

using namespace attograd;
using namespace attograd::custom_layer;
using namespace attograd::testing;

namespace {

Tensor fn_custom(const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }
Tensor fn_buggy(const std::vector<Tensor>& in) { return RMSNormBuggy()(in[0], in[1]); }

}  // namespace

TEST(CustomRMSNorm, ForwardMatchesHandComputedValues) {
  // eps = 0. Row [3, 4]: rms = √((9 + 16) / 2) = √12.5; row [1, −1]: rms = 1.
  Tensor x = Tensor::from_list({3, 4, 1, -1}, {2, 2}, DType::f64);
  Tensor g = Tensor::from_list({1, 2}, {2}, DType::f64);
  Tensor y = RMSNormFunction(0.0)(x, g);
  const double r = std::sqrt(12.5);
  expect_close(y, Tensor::from_list({3 / r, 8 / r, 1, -2}, {2, 2}, DType::f64), 1e-12, 1e-14);
}

TEST(CustomRMSNorm, BackwardMatchesHandComputedValues) {
  // x = [3, 4], g = [1, 1], grad = [1, 0], eps = 0:
  //   dx_k = g_k grad_k / r − x_k · mean(x ⊙ g ⊙ grad) / r³,  mean(...) = 3 / 2
  //   dg_k = grad_k x_k / r
  Tensor x = Tensor::from_list({3, 4}, {1, 2}, DType::f64).requires_grad_();
  Tensor g = Tensor::ones({2}, DType::f64).requires_grad_();
  RMSNormFunction(0.0)(x, g).backward(Tensor::from_list({1, 0}, {1, 2}, DType::f64));
  const double r = std::sqrt(12.5), r3 = r * r * r;
  expect_close(x.grad(), Tensor::from_list({1 / r - 3 * 1.5 / r3, -4 * 1.5 / r3}, {1, 2}, DType::f64), 1e-12, 1e-14);
  expect_close(g.grad(), Tensor::from_list({3 / r, 0}, {2}, DType::f64), 1e-12, 1e-14);
}

TEST(CustomRMSNorm, RecordsOneNode) {
  Tensor y = rms_norm(uniform_leaf({2, 3}, 1), uniform_leaf({3}, 2));
  EXPECT_EQ(y.grad_fn_name(), "rms_norm");
  EXPECT_TRUE(y.requires_grad());
  NoGradGuard no_grad;
  EXPECT_FALSE(rms_norm(uniform_leaf({2, 3}, 1), uniform_leaf({3}, 2)).requires_grad());
}

TEST(CustomRMSNorm, GradcheckPassesWrtXAndGain) {
  GradcheckReport r = gradcheck(fn_custom, {uniform_leaf({3, 5}, 3), uniform_leaf({5}, 4, 0.5, 1.5)});
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_TRUE(r.inputs[0].checked && r.inputs[1].checked);
  EXPECT_LT(r.inputs[0].max_abs_err, 1e-7);
  EXPECT_LT(r.inputs[1].max_abs_err, 1e-7);
  EXPECT_TRUE(contains(r.summary(), "gradcheck passed (2 of 2 inputs checked)")) << r.summary();
}

TEST(CustomRMSNorm, GradcheckPassesWithBatchDimsAndNonContiguousInput) {
  GradcheckReport batched = gradcheck(fn_custom, {uniform_leaf({2, 3, 4}, 5), uniform_leaf({4}, 6)});
  EXPECT_TRUE(batched.ok) << batched.summary();
  // A [5, 3] leaf seen as [3, 5]: the op reads it through contiguous().
  Tensor xt = uniform_leaf({5, 3}, 7).detach().transpose(0, 1).requires_grad_();
  ASSERT_FALSE(xt.is_contiguous());
  GradcheckReport strided = gradcheck(fn_custom, {xt, uniform_leaf({5}, 8)});
  EXPECT_TRUE(strided.ok) << strided.summary();
}

TEST(CustomRMSNorm, ComputesOnlyTheGradientsAskedFor) {
  Tensor x = uniform_leaf({2, 4}, 9), g = uniform_leaf({4}, 10).detach();
  GradcheckReport r = gradcheck(fn_custom, {x, g});
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_FALSE(r.inputs[1].checked);
  rms_norm(x, g).backward(Tensor::ones({2, 4}, DType::f64));
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(g.grad().defined());

  Tensor x2 = uniform_leaf({2, 4}, 9).detach(), g2 = uniform_leaf({4}, 10);
  rms_norm(x2, g2).backward(Tensor::ones({2, 4}, DType::f64));
  EXPECT_TRUE(g2.grad().defined());
  EXPECT_FALSE(x2.grad().defined());
}

TEST(CustomRMSNorm, BuggyBackwardFailsGradcheckNamingInputZeroAndItsWorstElement) {
  const GradcheckOptions opt;
  GradcheckReport r = gradcheck(fn_buggy, {uniform_leaf({3, 5}, 3), uniform_leaf({5}, 4, 0.5, 1.5)}, opt);
  EXPECT_FALSE(r.ok);
  ASSERT_EQ(r.inputs.size(), 2u);
  const InputReport& bad = r.inputs[0];
  EXPECT_TRUE(bad.checked);
  EXPECT_FALSE(bad.ok);
  EXPECT_TRUE(r.inputs[1].ok) << "the bug is in dx only; dg is right";
  // The worst element is a real element of x [3, 5] with disagreeing values.
  ASSERT_EQ(bad.worst_input_index.size(), 2u);
  EXPECT_GE(bad.worst_input_index[0], 0);
  EXPECT_LT(bad.worst_input_index[0], 3);
  EXPECT_GE(bad.worst_input_index[1], 0);
  EXPECT_LT(bad.worst_input_index[1], 5);
  EXPECT_GE(bad.worst_output, 0);
  EXPECT_LT(bad.worst_output, 15);
  EXPECT_GT(std::abs(bad.numerical - bad.analytical), opt.atol + opt.rtol * std::abs(bad.numerical));
  // The dropped term couples elements of one row only: the worst pair sits in one row.
  EXPECT_EQ(bad.worst_output / 5, bad.worst_input_index[0]);
  const std::string s = r.summary();
  EXPECT_TRUE(contains(s, "gradcheck FAILED")) << s;
  EXPECT_TRUE(contains(s, "input 0: FAILED")) << s;
  EXPECT_TRUE(contains(s, "input 1: ok")) << s;
  ASSERT_FALSE(r.failures.empty());
  EXPECT_TRUE(contains(r.failures[0], "input 0 [3, 5]: Jacobian mismatch")) << r.failures[0];

  GradcheckOptions raise;
  raise.raise_on_failure = true;
  EXPECT_THROW(gradcheck(fn_buggy, {uniform_leaf({3, 5}, 3), uniform_leaf({5}, 4)}, raise), GradcheckError);
}

TEST(CustomRMSNorm, BuggyForwardIsStillRight) {
  Tensor x = uniform_leaf({3, 5}, 11), g = uniform_leaf({5}, 12);
  expect_close(RMSNormBuggy()(x, g), rms_norm(x, g), 0, 0);
}

TEST(CustomRMSNorm, EqualsCompositeForwardAndBackward) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const double tol = dtype == DType::f64 ? 1e-12 : 1e-5;
    Tensor x = uniform_leaf({2, 3, 6}, 13, -2, 2, dtype), g = uniform_leaf({6}, 14, 0.5, 1.5, dtype);
    Tensor xc = x.detach().clone().requires_grad_(), gc = g.detach().clone().requires_grad_();
    Tensor grad = uniform_leaf({2, 3, 6}, 15, -2, 2, dtype).detach();
    Tensor y = rms_norm(x, g), yc = rms_norm_composite(xc, gc);
    EXPECT_EQ(y.dtype(), dtype);
    expect_close(y, yc, tol, tol);
    y.backward(grad);
    yc.backward(grad);
    expect_close(x.grad(), xc.grad(), tol, tol);
    expect_close(g.grad(), gc.grad(), tol, tol);
  }
}

TEST(CustomRMSNorm, CompositeAlsoPassesGradcheck) {
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return rms_norm_composite(in[0], in[1]); },
                                {uniform_leaf({3, 4}, 16), uniform_leaf({4}, 17)});
  EXPECT_TRUE(r.ok) << r.summary();
}

TEST(CustomRMSNorm, ModuleRegistersTheGainAndGradchecksThroughIt) {
  RMSNorm m(4, 1e-6, /*use_composite=*/false, DType::f64);
  const auto params = m.named_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "weight");
  expect_close(m.weight, Tensor::ones({4}, DType::f64), 0, 0);
  {
    NoGradGuard no_grad;
    m.weight.copy_(Tensor::from_list({0.5, 1.0, 1.5, 2.0}, {4}, DType::f64));
  }
  GradcheckReport r = gradcheck([&](const std::vector<Tensor>& in) { return m.forward(in[0]); },
                                {uniform_leaf({2, 3, 4}, 18), m.weight});
  EXPECT_TRUE(r.ok) << r.summary();
  RMSNorm ref(4, 1e-6, /*use_composite=*/true, DType::f64);
  ref.load_state_dict(m.state_dict());
  Tensor x = uniform_leaf({3, 4}, 19);
  expect_close(m.forward(x), ref.forward(x), 1e-12, 1e-14);
  EXPECT_TRUE(contains(m.repr(), "RMSNorm((4,), eps=1e-06")) << m.repr();
}

TEST(CustomRMSNorm, BadArgumentsNameTheOpAndShapes) {
  std::string msg = error_message<ShapeError>([] { rms_norm(uniform_leaf({2, 4}, 1), uniform_leaf({3}, 2)); });
  EXPECT_TRUE(contains(msg, "rms_norm") && contains(msg, "[3]") && contains(msg, "[2, 4]")) << msg;
  msg = error_message<ShapeError>([] { rms_norm(uniform_leaf({2, 4}, 1), uniform_leaf({1, 4}, 2)); });
  EXPECT_TRUE(contains(msg, "[1, 4]")) << msg;
  msg = error_message<ShapeError>([] { rms_norm(Tensor::scalar(1.0, DType::f64), uniform_leaf({1}, 2)); });
  EXPECT_TRUE(contains(msg, "rms_norm") && contains(msg, "0-d")) << msg;
  msg = error_message<DTypeError>([] { rms_norm(uniform_leaf({2, 4}, 1), uniform_leaf({4}, 2, -2, 2, DType::f32)); });
  EXPECT_TRUE(contains(msg, "rms_norm") && contains(msg, "f32") && contains(msg, "f64")) << msg;
  msg = error_message<ShapeError>([] { rms_norm_composite(uniform_leaf({2, 4}, 1), uniform_leaf({3}, 2)); });
  EXPECT_TRUE(contains(msg, "rms_norm_composite")) << msg;
}
