// Gradient clipping against torch.nn.utils.clip_grad_norm_ / clip_grad_value_
// fixtures, hand-computed cases, and the non-finite and argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/autograd.h>
#include <attograd/optim/optim.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;

namespace {

void expect_close(const Tensor& actual, const Tensor& expected, double rtol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_LE(std::abs(a[i] - e[i]), rtol * std::abs(e[i]) + 1e-15) << what << " element " << i;
}

// Parameters (zeros) whose .grad holds the given values.
std::vector<Tensor> with_grads(const std::vector<Tensor>& grads) {
  std::vector<Tensor> params;
  for (const Tensor& g : grads) {
    Tensor p = Tensor::zeros(g.shape(), g.dtype()).requires_grad_();
    p.set_grad(g.clone());
    params.push_back(p);
  }
  return params;
}

}  // namespace

TEST(ClipTorch, MatchesFixture) {
  const SafetensorsData fx = load_safetensors(std::string(ATTOGRAD_SOURCE_DIR) + "/tests/fixtures/optim/clip.safetensors");
  std::vector<Tensor> grads;
  for (size_t i = 0; fx.tensors.count("grad." + std::to_string(i)); ++i) grads.push_back(fx.tensors.at("grad." + std::to_string(i)));
  ASSERT_EQ(grads.size(), 3u);
  ASSERT_GE(fx.metadata.size(), 5u);
  for (const auto& [name, text] : fx.metadata) {
    SCOPED_TRACE(name);
    const auto cfg = nlohmann::json::parse(text);
    const auto& args = cfg["args"];
    for (DType dtype : {DType::f64, DType::f32}) {
      std::vector<Tensor> gs;
      for (const Tensor& g : grads) gs.push_back(g.to(dtype));
      std::vector<Tensor> params = with_grads(gs);
      const double rtol = dtype == DType::f64 ? 1e-12 : 1e-6;
      if (cfg["kind"] == "norm") {
        const double norm_type = args["norm_type"].is_string() ? INFINITY : args["norm_type"].get<double>();
        const double total = optim::clip_grad_norm(params, args["max_norm"].get<double>(), norm_type);
        const double want = fx.tensors.at(name + ".total_norm").item();
        EXPECT_NEAR(total, want, rtol * want);
      } else {
        optim::clip_grad_value(params, args["clip_value"].get<double>());
      }
      for (size_t i = 0; i < params.size(); ++i)
        expect_close(params[i].grad(), fx.tensors.at(name + ".grad." + std::to_string(i)), rtol,
                     fmt::format("{} grad {}", dtype_name(dtype), i));
    }
  }
}

TEST(ClipGradNorm, ByHandTreatsGradientsAsOneVector) {
  // |(3, 4, 12)| = 13 across two tensors.
  std::vector<Tensor> params = with_grads({Tensor::from_list({3, 4}, {2}, DType::f64), Tensor::from_list({12}, {1}, DType::f64)});
  const double total = optim::clip_grad_norm(params, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_DOUBLE_EQ(params[0].grad().to_vector<double>()[0], 3 * coef);
  EXPECT_DOUBLE_EQ(params[0].grad().to_vector<double>()[1], 4 * coef);
  EXPECT_DOUBLE_EQ(params[1].grad().item(), 12 * coef);
  // Below the limit: unchanged.
  std::vector<Tensor> small = with_grads({Tensor::from_list({0.3, -0.4}, {2}, DType::f64)});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(small, 1.0), 0.5);
  EXPECT_EQ(small[0].grad().to_vector<double>(), (std::vector<double>{0.3, -0.4}));
  // Other norms.
  std::vector<Tensor> p1 = with_grads({Tensor::from_list({3, -4}, {2}, DType::f64)});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(p1, 100.0, 1.0), 7.0);
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(p1, 100.0, INFINITY), 4.0);
  EXPECT_NEAR(optim::clip_grad_norm(p1, 100.0, 3.0), std::cbrt(27.0 + 64.0), 1e-14);
}

TEST(ClipGradNorm, SkipsParametersWithoutGradients) {
  Tensor none = Tensor::zeros({3}, DType::f64).requires_grad_();
  std::vector<Tensor> params = with_grads({Tensor::from_list({6, 8}, {2}, DType::f64)});
  params.push_back(none);
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm(params, 1.0), 10.0);
  EXPECT_FALSE(none.grad().defined());
  EXPECT_EQ(optim::clip_grad_norm({none}, 1.0), 0.0);
  EXPECT_EQ(optim::clip_grad_norm({}, 1.0), 0.0);
}

TEST(ClipGradNorm, NonContiguousGradient) {
  Tensor p = Tensor::zeros({2, 3}, DType::f64).requires_grad_();
  const Tensor g = Tensor::from_list({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f64).transpose(0, 1);
  ASSERT_FALSE(g.is_contiguous());
  p.set_grad(g);
  const double total = optim::clip_grad_norm({p}, 1.0);
  EXPECT_NEAR(total, std::sqrt(91.0), 1e-13);
  const double coef = 1.0 / (std::sqrt(91.0) + 1e-6);
  const std::vector<double> got = p.grad().to_vector<double>();
  const std::vector<double> want = {1, 3, 5, 2, 4, 6};  // g in logical order
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i] * coef, 1e-15);
}

TEST(ClipGradNorm, NonFinite) {
  std::vector<Tensor> params = with_grads({Tensor::from_list({1.0, NAN}, {2}, DType::f64)});
  expect_error<ValueError>([&] { optim::clip_grad_norm(params, 1.0, 2.0, true); },
                           {"clip_grad_norm", "order 2", "nan", "error_if_nonfinite"});
  std::vector<Tensor> inf = with_grads({Tensor::from_list({1.0, INFINITY}, {2}, DType::f32)});
  expect_error<ValueError>([&] { optim::clip_grad_norm(inf, 1.0, INFINITY, true); }, {"clip_grad_norm", "inf"});
  // Without the flag the gradients are scaled anyway, as in PyTorch: NaN everywhere.
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm(params, 1.0)));
  for (double v : params[0].grad().to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  // An infinite norm gives coef 0: finite entries become 0, the infinite one NaN.
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm(inf, 1.0)));
  EXPECT_EQ(inf[0].grad().to_vector<double>()[0], 0.0);
  EXPECT_TRUE(std::isnan(inf[0].grad().to_vector<double>()[1]));
}

TEST(ClipGradNorm, ArgumentErrors) {
  std::vector<Tensor> params = with_grads({Tensor::from_list({1.0}, {1}, DType::f64)});
  expect_error<ValueError>([&] { optim::clip_grad_norm(params, -1.0); }, {"clip_grad_norm", "max_norm", "-1"});
  expect_error<ValueError>([&] { optim::clip_grad_norm(params, 1.0, 0.0); }, {"clip_grad_norm", "norm_type"});
  expect_error<ValueError>([&] { optim::clip_grad_norm(params, 1.0, NAN); }, {"clip_grad_norm", "norm_type"});
}

TEST(ClipGradValue, ClampsEachElement) {
  std::vector<Tensor> params = with_grads({Tensor::from_list({-2.0, -0.1, 0.0, 0.5, NAN, 3.0}, {2, 3}, DType::f32)});
  optim::clip_grad_value(params, 0.25);
  const std::vector<float> got = params[0].grad().to_vector<float>();
  EXPECT_EQ(got[0], -0.25f);
  EXPECT_EQ(got[1], -0.1f);
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_EQ(got[3], 0.25f);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], 0.25f);
  expect_error<ValueError>([&] { optim::clip_grad_value(params, -1.0); }, {"clip_grad_value", "clip >= 0"});
}
