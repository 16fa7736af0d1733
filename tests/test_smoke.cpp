#include <gtest/gtest.h>
#include "autograd/ops.h"
using namespace attograd;
TEST(Smoke, MulBackward) {
  Tensor a = Tensor::from_list({1, 2, 3}, {3}, DType::f64).requires_grad_();
  Tensor b = Tensor::from_list({4, 5, 6}, {3}, DType::f64).requires_grad_();
  Tensor y = sum(a * b + a);
  y.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{5, 6, 7}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
  fmt::print("{}\n{}\n", y, a.grad());
}
#include "autograd/gradcheck.h"
TEST(Smoke, Gradcheck) {
  Generator gen(1);
  Tensor a = Tensor::randn({3, 4}, gen, DType::f64).requires_grad_();
  Tensor b = Tensor::randn({4}, gen, DType::f64).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0] * in[1]) / (in[1] * in[1] + 1.0); }, {a, b});
  fmt::print("{}\n", r.summary());
  EXPECT_TRUE(r.ok);
}
