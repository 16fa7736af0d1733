// tour: attograd in one page: tensors, backward and .grad, a two-layer MLP on two moons, Adam, gradcheck.
#include <cmath>
#include <numbers>

#include <attograd/autograd/autograd.h>
#include <attograd/nn/linear.h>
#include <attograd/optim/adam.h>
using namespace attograd;

int main() {
  Tensor a = Tensor::from_list({1, 2, 3}, {3}).requires_grad_();  // a leaf: backward fills a.grad()
  Tensor y = sum(a * a);                                           // y = Σ a², recorded as a graph
  y.backward();                                                    // dy/da = 2a
  fmt::print("y = {}\ndy/da = {}\n", y, a.grad());
  Generator gen(1);  // two moons: 256 noisy points on two interleaved half circles, classes 0 and 1
  std::vector<float> points;
  std::vector<int64_t> labels;
  for (int i = 0; i < 256; ++i) {
    const double t = std::numbers::pi * gen.uniform(), c = i % 2;
    points.push_back(static_cast<float>(c + (1 - 2 * c) * std::cos(t) + 0.2 * gen.normal()));
    points.push_back(static_cast<float>(c / 2 + (1 - 2 * c) * std::sin(t) + 0.2 * gen.normal()));
    labels.push_back(i % 2);
  }
  const Tensor x = Tensor::from_vector(points, {256, 2}), target = Tensor::from_vector(labels, {256});
  Linear fc1(2, 16, gen), fc2(16, 2, gen);  // the MLP: x -> Linear(2, 16) -> tanh -> Linear(16, 2) -> logits
  optim::Adam opt({fc1.weight, fc1.bias, fc2.weight, fc2.bias}, {.lr = 0.05});
  for (int step = 0; step <= 200; ++step) {
    Tensor loss = cross_entropy(fc2.forward(tanh(fc1.forward(x))), target);
    opt.zero_grad();
    loss.backward();  // fills the .grad of the four parameters
    if (step == 0) fmt::print("fc2.bias.grad = {}\n", fc2.bias.grad());
    if (step % 40 == 0) fmt::print("step {:3}  loss {:.4f}\n", step, loss.item());
    opt.step();  // every parameter takes an Adam step against its .grad
  }
  Tensor z = Tensor::randn({3, 4}, gen, DType::f64).requires_grad_();  // gradcheck wants float64 leaves
  GradcheckReport check = gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {z});
  fmt::print("gradcheck of tanh (backward vs finite differences): {}\n", check.ok ? "passed" : check.summary());
}
