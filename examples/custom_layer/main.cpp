// custom_layer: how to add a layer that attograd does not have, prove its
// backward right, and train with it. Read it top to bottom with rmsnorm.h.
//
//   custom_layer check   gradcheck RMSNorm (and a buggy RMSNorm, to see a
//                        failure report), custom vs composite, SwiGLU
//   custom_layer train   a small MLP with an RMSNorm layer, trained twice:
//                        custom op vs composite, same seed
//   custom_layer         both
#include <algorithm>
#include <chrono>
#include <cmath>

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <attograd/autograd/gradcheck.h>
#include <attograd/autograd/ops/indexing.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/matmul.h>
#include "examples/common/cli.h"
#include <attograd/nn/linear.h>
#include <attograd/optim/adam.h>
#include "rmsnorm.h"

using namespace attograd;
using namespace attograd::app;
using namespace attograd::custom_layer;

namespace {

// ---- SwiGLU: the lambda form, custom_op(name, inputs, forward, backward) ----
//
// The gated feed-forward of LLaMA-style models (Shazeer 2020):
//   out = (x W1) ⊙ silu(x W2),   silu(b) = b · σ(b)
// Shapes: x [N, I], W1 [I, O], W2 [I, O]; a = x W1, b = x W2, out [N, O].
Tensor swiglu(const Tensor& input, const Tensor& weight1, const Tensor& weight2) {
  if (input.dim() != 2)
    fail<ShapeError>("swiglu", "x must be [N, I], got {}; hint: flatten the batch dims", shape_str(input.shape()));
  return custom_op(
      "swiglu", {input, weight1, weight2},
      [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
        Tensor a = matmul(in[0], in[1]), b = matmul(in[0], in[2]);  // [N, O] each
        ctx.save_for_backward({in[0], in[1], in[2], a, b});
        return a * (b * sigmoid(b));
      },
      [](FunctionCtx& ctx, const Tensor& grad) {
        // out = a ⊙ silu(b)   =>  da = grad ⊙ silu(b),  db = grad ⊙ a ⊙ silu'(b)
        //   silu'(b) = σ(b) + b σ(b) (1 − σ(b)) = σ(b) (1 + b (1 − σ(b)))
        // a = x W1, b = x W2  =>  dx = da W1ᵀ + db W2ᵀ,  dW1 = xᵀ da,  dW2 = xᵀ db
        const Tensor &x = ctx.saved(0), &w1 = ctx.saved(1), &w2 = ctx.saved(2), &a = ctx.saved(3), &b = ctx.saved(4);
        const Tensor s = sigmoid(b);
        const Tensor da = grad * (b * s), db = grad * a * (s * (1.0 + b * (1.0 - s)));
        std::vector<Tensor> d(3);  // dx, dW1, dW2
        if (ctx.needs_input_grad(0)) d[0] = matmul(da, w1.transpose(0, 1)) + matmul(db, w2.transpose(0, 1));
        if (ctx.needs_input_grad(1)) d[1] = matmul(x.transpose(0, 1), da);
        if (ctx.needs_input_grad(2)) d[2] = matmul(x.transpose(0, 1), db);
        return d;
      });
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

Tensor leaf(const Shape& shape, Generator& gen, DType dtype, double lo = -2, double hi = 2) {
  return Tensor::uniform(shape, lo, hi, gen, dtype).requires_grad_();
}

// ---- check -------------------------------------------------------------------

// Runs the custom and the composite RMSNorm on the same inputs and compares
// outputs and both input gradients (for the output gradient `grad`).
void compare_with_composite(DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor x = leaf({4, 8}, gen, dtype), g = leaf({8}, gen, dtype, 0.5, 1.5), grad = leaf({4, 8}, gen, dtype).detach();
  Tensor xc = x.detach().clone().requires_grad_(), gc = g.detach().clone().requires_grad_();
  Tensor y = rms_norm(x, g), yc = rms_norm_composite(xc, gc);
  y.backward(grad);
  yc.backward(grad);
  fmt::print("  {}: max |y − y_ref| {:.2g}, |dx − dx_ref| {:.2g}, |dg − dg_ref| {:.2g}   (graph: 1 node '{}' vs "
             "composite ending in '{}')\n", dtype_name(dtype), max_abs_diff(y, yc), max_abs_diff(x.grad(), xc.grad()),
             max_abs_diff(g.grad(), gc.grad()), y.grad_fn_name(), yc.grad_fn_name());
}

int check(uint64_t seed) {
  Generator gen(seed);
  // gradcheck wants float64 leaves; it perturbs each element by ±1e-6 and
  // compares the finite-difference Jacobian with the one backward computes.
  Tensor x = leaf({3, 5}, gen, DType::f64), g = leaf({5}, gen, DType::f64, 0.5, 1.5);

  fmt::print("1. gradcheck of RMSNormFunction (x [3, 5], g [5], float64):\n");
  GradcheckReport ok = gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1]); }, {x, g});
  fmt::print("{}\n\n", ok.summary());

  fmt::print("2. gradcheck of RMSNormBuggy (its backward forgets dx's second term):\n");
  GradcheckReport bad = gradcheck([](const std::vector<Tensor>& in) { return RMSNormBuggy()(in[0], in[1]); }, {x, g});
  fmt::print("{}\n\n", bad.summary());

  fmt::print("3. custom vs composite (mul, mean, sqrt, div) RMSNorm, same inputs and output gradient:\n");
  compare_with_composite(DType::f64, seed + 1);
  compare_with_composite(DType::f32, seed + 1);

  fmt::print("\n4. gradcheck of swiglu, the custom_op lambda form (x [4, 3], W1 [3, 5], W2 [3, 5]):\n");
  Tensor sx = leaf({4, 3}, gen, DType::f64), w1 = leaf({3, 5}, gen, DType::f64), w2 = leaf({3, 5}, gen, DType::f64);
  GradcheckReport sw = gradcheck([](const std::vector<Tensor>& in) { return swiglu(in[0], in[1], in[2]); }, {sx, w1, w2});
  fmt::print("{}\n", sw.summary());

  const bool as_expected = ok.ok && !bad.ok && sw.ok;
  fmt::print("\ncheck: {}\n", as_expected ? "as expected (correct backwards pass, the buggy one is caught)"
                                          : "UNEXPECTED RESULT");
  return as_expected ? 0 : 1;
}

// ---- train -------------------------------------------------------------------
//
// The task: classify x [N, D] into K classes by a hidden linear teacher,
// label = argmax(x · T). Each example is scaled by a random factor in
// [0.05, 20], which leaves its label unchanged; the RMSNorm after the first
// layer takes most of that scale out.

struct Data {
  Tensor x;       // [N, D] f32
  Tensor labels;  // [N] i64
};

Data make_data(int64_t n, const Tensor& teacher, Generator& gen) {
  const int64_t d = teacher.size(0);
  Tensor x = Tensor::randn({n, d}, gen);
  Tensor labels = argmax(matmul(x, teacher), 1);
  Tensor scale = exp(Tensor::uniform({n, 1}, std::log(0.05), std::log(20.0), gen));
  return {x * scale, labels};
}

// Linear -> RMSNorm -> ReLU -> Linear
class Classifier : public Module {
 public:
  Classifier(int64_t in, int64_t hidden, int64_t classes, bool composite, Generator& gen) : Module("Classifier") {
    fc1 = register_module("fc1", std::make_shared<Linear>(in, hidden, gen));
    norm = register_module("norm", std::make_shared<RMSNorm>(hidden, 1e-6, composite));
    fc2 = register_module("fc2", std::make_shared<Linear>(hidden, classes, gen));
  }
  Tensor forward(const Tensor& x) { return fc2->forward(relu(norm->forward(fc1->forward(x)))); }
  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<RMSNorm> norm;
};

struct Eval {
  double loss, accuracy;
};

Eval evaluate(Classifier& model, const Data& d) {
  NoGradGuard no_grad;
  const Tensor logits = model.forward(d.x);
  const auto pred = argmax(logits, 1).to_vector<int64_t>(), want = d.labels.to_vector<int64_t>();
  int64_t hits = 0;
  for (size_t i = 0; i < pred.size(); ++i) hits += pred[i] == want[i];
  return {cross_entropy(logits, d.labels).item(), static_cast<double>(hits) / static_cast<double>(pred.size())};
}

struct RunOptions {
  int64_t steps, hidden, batch;
  double lr;
  uint64_t seed;
};

int train(const RunOptions& o) {
  constexpr int64_t kIn = 16, kClasses = 4, kTrain = 2048, kTest = 1024;
  Generator data_gen(o.seed);
  const Tensor teacher = Tensor::randn({kIn, kClasses}, data_gen);
  const Data train_set = make_data(kTrain, teacher, data_gen), test_set = make_data(kTest, teacher, data_gen);

  // Two models from the same seed: identical initial weights, identical batches.
  Generator init_a(o.seed + 1), init_b(o.seed + 1);
  Classifier custom(kIn, o.hidden, kClasses, /*composite=*/false, init_a);
  Classifier composite(kIn, o.hidden, kClasses, /*composite=*/true, init_b);
  optim::AdamW opt_a(custom.parameters(), {.lr = o.lr}), opt_b(composite.parameters(), {.lr = o.lr});
  fmt::print("train: {} examples, {} classes, inputs scaled by 0.05..20 | MLP {} -> Linear {} -> RMSNorm -> ReLU -> "
             "Linear {} ({} parameters) | AdamW lr {}, batch {}, {} steps\n", kTrain, kClasses, kIn, o.hidden, kClasses,
             custom.num_parameters(), o.lr, o.batch, o.steps);
  fmt::print("{:>6}  {:>12}  {:>12}\n", "step", "loss custom", "composite");

  Generator batch_gen(o.seed + 2);
  double worst_gap = 0, secs_a = 0, secs_b = 0, last_a = 0, last_b = 0;
  auto timed_step = [](Classifier& m, optim::AdamW& opt, const Tensor& xb, const Tensor& yb, double& secs) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor loss = cross_entropy(m.forward(xb), yb);
    opt.zero_grad();
    loss.backward();
    opt.step();
    secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return loss.item();
  };
  for (int64_t step = 1; step <= o.steps; ++step) {
    std::vector<int64_t> ids(o.batch);
    for (auto& i : ids) i = static_cast<int64_t>(batch_gen.randint(kTrain));
    const Tensor idx = Tensor::from_vector(ids, {o.batch});
    const Tensor xb = index_select(train_set.x, 0, idx), yb = index_select(train_set.labels, 0, idx);
    last_a = timed_step(custom, opt_a, xb, yb, secs_a);
    last_b = timed_step(composite, opt_b, xb, yb, secs_b);
    worst_gap = std::max(worst_gap, std::abs(last_a - last_b));
    if (step == 1 || step % std::max<int64_t>(1, o.steps / 8) == 0 || step == o.steps)
      fmt::print("{:>6}  {:>12.4f}  {:>12.4f}\n", step, last_a, last_b);
  }
  const Eval a = evaluate(custom, test_set), b = evaluate(composite, test_set);
  fmt::print("held-out ({} examples): custom loss {:.4f}, accuracy {:.1f}% | composite loss {:.4f}, accuracy {:.1f}%\n",
             kTest, a.loss, 100 * a.accuracy, b.loss, 100 * b.accuracy);
  fmt::print("largest loss gap between the two runs: {:.2g}; training time: custom {:.2f} s, composite {:.2f} s\n",
             worst_gap, secs_a, secs_b);
  return 0;
}

cxxopts::Options make_options() {
  cxxopts::Options o("custom_layer", "A layer attograd does not have (RMSNorm, SwiGLU): custom backward, gradcheck, "
                     "training.\nModes: check, train; no mode runs both.");
  o.add_options()
      ("steps", "training steps", cxxopts::value<int64_t>()->default_value("400"))
      ("hidden", "hidden width of the MLP", cxxopts::value<int64_t>()->default_value("64"))
      ("batch", "batch size", cxxopts::value<int64_t>()->default_value("64"))
      ("lr", "AdamW learning rate", cxxopts::value<double>()->default_value("0.003"))
      ("seed", "random seed (data, init, batches, gradcheck inputs)", cxxopts::value<uint64_t>()->default_value("1"))
      ("h,help", "show this help");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("custom_layer", [&] {
    const auto parsed = cli::parse_mode_and_flags(argc, argv, {"all", "check", "train"},
                                                   "check or train (or nothing for both)",
                                                   [](const std::string&) { return make_options(); });
    if (!parsed) return 0;
    const auto& [mode, r, inputs] = *parsed;
    if (!inputs.empty()) fail<ValueError>("flags", "unexpected argument '{}'", inputs[0]);
    const RunOptions t{cli::flag_in_range<int64_t>(r, "steps", 1, 10'000'000),
                       cli::flag_in_range<int64_t>(r, "hidden", 1, 1 << 14),
                       cli::flag_in_range<int64_t>(r, "batch", 1, 1 << 16), cli::flag_in_range<double>(r, "lr", 1e-12, 1e6),
                       r["seed"].as<uint64_t>()};
    int rc = 0;
    if (mode != "train") rc = check(t.seed);
    if (mode != "check") {
      if (mode == "all") fmt::print("\n");
      rc = std::max(rc, train(t));
    }
    return rc;
  });
}
