// higher_order: differentiating a backward pass (grad with create_graph, docs/autograd.md section 12).
//   1. a Hessian-vector product of a small MLP's loss, checked against finite differences of its gradient
//   2. training with a gradient penalty: loss + λ ‖∂loss/∂x‖², where ∂loss/∂x is itself a recorded graph
//   3. that double-backward graph as a Graphviz picture (--dot FILE), beside the forward graph's size
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include <attograd/autograd/autograd.h>
#include <attograd/autograd/graph_dot.h>
#include <attograd/nn/layers.h>
#include <attograd/nn/linear.h>
#include <attograd/optim/adam.h>
#include "examples/common/cli.h"
#include "examples/common/preflight.h"
using namespace attograd;
using namespace attograd::app;

namespace {

// Σ_i <a_i, b_i> over a list of tensors: a recorded scalar.
Tensor dot(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  Tensor total = sum(a[0] * b[0]);
  for (size_t i = 1; i < a.size(); ++i) total = total + sum(a[i] * b[i]);
  return total;
}

// Adds scale · v to every parameter in place (not recorded).
void nudge(const std::vector<Tensor>& params, const std::vector<Tensor>& v, double scale) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i];
    p.copy_(p + scale * v[i]);
  }
}

// The vertices of a DOT picture: its lines "  n<k> [...]" (edges are "  n<i> -> n<k>").
int64_t dot_vertices(const std::string& dot) {
  std::istringstream lines(dot);
  int64_t n = 0;
  for (std::string line; std::getline(lines, line);)
    n += line.starts_with("  n") && line.size() > 3 && std::isdigit(line[3]) && line.find(" -> ") == std::string::npos;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::guarded_main("higher_order", [&] {
    cxxopts::Options options("higher_order", "A Hessian-vector product and a gradient penalty, with grad(create_graph)");
    options.add_options()("dot", "write the gradient penalty's double-backward graph as Graphviz DOT to FILE",
                          cxxopts::value<std::string>()->default_value(""), "FILE")
        ("steps", "training steps with the gradient penalty", cxxopts::value<int64_t>()->default_value("40"))
        ("lambda", "weight of the penalty ||dloss/dx||^2", cxxopts::value<double>()->default_value("100"))
        ("help", "this help");
    const cxxopts::ParseResult r = cli::parse_flags(options, argc, argv);
    if (r.count("help")) {
      fmt::print("{}", options.help());
      return 0;
    }
    if (!r.unmatched().empty()) fail<ValueError>("flags", "unexpected argument '{}'", r.unmatched()[0]);
    const int64_t steps = cli::flag_in_range<int64_t>(r, "steps", 1, 100000);
    const double lambda = cli::flag_in_range<double>(r, "lambda", 0.0, 1e6);
    if (const std::string path = r["dot"].as<std::string>(); !path.empty()) check_file_writable(path, "--dot");

    // A regression y = tanh(x0 + x1 - x2) on 64 points, fitted by x -> Linear(3, 16) -> GELU -> Linear(16, 1).
    // float64 throughout, so finite differences can be trusted to ~1e-9.
    Generator gen(7);
    const Tensor data = Tensor::randn({64, 3}, gen, DType::f64);
    const Tensor target = tanh(data.slice(1, 0, 1) + data.slice(1, 1, 2) - data.slice(1, 2, 3));
    Sequential model({std::make_shared<Linear>(3, 16, gen, true, DType::f64), std::make_shared<GELU>(),
                      std::make_shared<Linear>(16, 1, gen, true, DType::f64)});
    const std::vector<Tensor> params = model.parameters();
    auto loss_at = [&](const Tensor& x) { return mse_loss(model(x), target); };

    // 1. Hv = ∂<g, v>/∂θ with g = ∂L/∂θ recorded (create_graph): one extra backward, no Hessian built.
    std::vector<Tensor> v;
    for (const Tensor& p : params) v.push_back(Tensor::randn(p.shape(), gen, DType::f64));
    const std::vector<Tensor> g = grad({loss_at(data)}, params, {}, {.create_graph = true});
    const std::vector<Tensor> hv = grad({dot(g, v)}, params);
    // The same from the gradient alone: (∇L(θ + εv) − ∇L(θ − εv)) / 2ε.
    const double eps = 1e-5;
    nudge(params, v, eps);
    const std::vector<Tensor> g_plus = grad({loss_at(data)}, params);
    nudge(params, v, -2 * eps);
    const std::vector<Tensor> g_minus = grad({loss_at(data)}, params);
    nudge(params, v, eps);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<double> a = hv[i].to_vector<double>(), p = g_plus[i].to_vector<double>(),
                                m = g_minus[i].to_vector<double>();
      for (size_t k = 0; k < a.size(); ++k) {
        worst = std::max(worst, std::abs(a[k] - (p[k] - m[k]) / (2 * eps)));
        scale = std::max(scale, std::abs(a[k]));
      }
    }
    fmt::print("Hessian-vector product of a 3-16-1 MLP's loss ({} parameters), random v:\n", model.num_parameters());
    fmt::print("  max |Hv - finite differences| / max |Hv| = {:.1e}  (eps {:.0e})\n\n", worst / scale, eps);

    // 2. The penalty ‖∂L/∂x‖² makes the fit flat in x; its gradient with respect to θ runs
    // backward through the recorded backward pass (the double-backward graph). A plain fit first.
    const Tensor x = data.clone().requires_grad_();
    Tensor penalty;
    auto train = [&](int64_t n, double weight, bool print) {  // leaves the last step's penalty recorded
      optim::Adam opt(params, {.lr = 0.01});
      for (int64_t step = 0; step <= n; ++step) {
        const Tensor loss = loss_at(x);
        const Tensor dx = grad({loss}, {x}, {}, {.create_graph = true})[0];
        penalty = sum(dx * dx);
        if (print && (step % 10 == 0 || step == n))
          fmt::print("step {:3}  loss {:.6f}  penalty {:.6f}\n", step, loss.item(), penalty.item());
        if (step == n) break;
        opt.zero_grad();
        (loss + weight * penalty).backward();
        opt.step();
      }
    };
    train(100, 0.0, false);
    fmt::print("after a plain fit of 100 steps, training loss + {} * penalty, penalty = ||dloss/dx||^2:\n", lambda);
    train(steps, lambda, true);

    // 3. The penalty's graph holds the forward and the recorded backward of it.
    TensorNames names = model.parameter_names();
    names[x.id()] = "x";
    const std::string picture = to_dot(penalty, {.names = names});
    const int64_t forward_vertices = dot_vertices(to_dot(loss_at(x), {.names = names}));
    fmt::print("\ngraph of the loss (forward): {} vertices; of the penalty (forward + recorded backward): {}\n",
               forward_vertices, dot_vertices(picture));
    if (const std::string path = r["dot"].as<std::string>(); !path.empty()) {
      std::ofstream out(path);
      out << picture;
      if (!out.flush()) fail<IOError>("--dot", "cannot write {}; hint: check that its folder exists", path);
      fmt::print("wrote {} (render it: dot -Tsvg {} -o penalty.svg)\n", path, path);
    }
    return 0;
  });
}
