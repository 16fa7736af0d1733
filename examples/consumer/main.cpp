// A layer attograd does not ship, written outside attograd's tree: ScaledTanh,
// y = a ⊙ tanh(x) with a learned per-feature scale a, as a custom Function
// with a hand-written backward. The program gradchecks it in float64, then
// trains a small regression net with it for a few steps.
//
// Shape legend: N rows, E features; x [N, E], a [E], y [N, E].
#include <cstdio>

#include <attograd/attograd.h>

using namespace attograd;

// y [N, E] = a ⊙ tanh(x);  x [N, E], a [E]
struct ScaledTanh : Function<ScaledTanh> {
  static constexpr const char* name = "scaled_tanh";

  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    const Tensor &x = in[0], &a = in[1];
    if (x.dim() != 2 || a.dim() != 1 || a.size(0) != x.size(1))
      fail<ShapeError>(name, "expected x [N, E] and a [E], got {} and {}", shape_str(x.shape()), shape_str(a.shape()));
    const Tensor t = tanh(x);
    ctx.save_for_backward({t, a});
    return t * a;
  }
  // y = a ⊙ t, t = tanh(x):  dx = grad ⊙ a ⊙ (1 − t²),  da = Σ_rows grad ⊙ t
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    const Tensor &t = ctx.saved(0), &a = ctx.saved(1);
    return {grad * a * (1.0 - t * t), sum(grad * t, {0})};
  }
};

class ScaledTanhLayer : public UnaryModule {
 public:
  explicit ScaledTanhLayer(int64_t features) : UnaryModule("ScaledTanh") {
    scale = register_parameter("scale", Tensor::ones({features}));
  }
  Tensor forward(const Tensor& x) override { return ScaledTanh{}(x, scale); }
  Tensor scale;  // [E]
};

class Net : public UnaryModule {
 public:
  Net(int64_t in, int64_t hidden, int64_t out, Generator& gen) : UnaryModule("Net") {
    l1 = register_module("l1", std::make_shared<Linear>(in, hidden, gen));
    act = register_module("act", std::make_shared<ScaledTanhLayer>(hidden));
    l2 = register_module("l2", std::make_shared<Linear>(hidden, out, gen));
  }
  Tensor forward(const Tensor& x) override { return l2->forward(act->forward(l1->forward(x))); }
  std::shared_ptr<Linear> l1, l2;
  std::shared_ptr<ScaledTanhLayer> act;
};

int main() try {
  std::printf("attograd %s (headers %s)\n", attograd::version(), ATTOGRAD_VERSION_STRING);

  Generator gen(0);
  Tensor x = Tensor::randn({3, 4}, gen, DType::f64).requires_grad_();
  Tensor a = Tensor::randn({4}, gen, DType::f64).requires_grad_();
  const GradcheckReport report = gradcheck([](const std::vector<Tensor>& in) { return ScaledTanh{}(in[0], in[1]); },
                                           {x, a});
  std::printf("%s\n", report.summary().c_str());
  if (!report.ok) return 1;

  // Regression onto a fixed random teacher: the loss must fall.
  const Tensor inputs = Tensor::randn({64, 8}, gen), teacher = Tensor::randn({8, 1}, gen);
  const Tensor targets = tanh(matmul(inputs, teacher));
  Net net(8, 16, 1, gen);
  optim::Adam opt(net.parameters(), {.lr = 0.02});
  double first = 0, last = 0;
  for (int step = 1; step <= 50; ++step) {
    Tensor loss = mse_loss(net(inputs), targets);
    opt.zero_grad();
    loss.backward();
    opt.step();
    last = loss.item();
    if (step == 1) first = last;
    if (step == 1 || step % 10 == 0) std::printf("step %2d  loss %.5f\n", step, last);
  }
  std::printf("loss %.5f -> %.5f\n", first, last);
  return last < first / 2 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "scaled_tanh: %s\n", e.what());
  return 2;
}
