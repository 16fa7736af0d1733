// Optimizers: SGD, Adam, AdamW against PyTorch trajectories, hand-computed
// first steps, convergence, state_dict round trips and error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/autograd.h>
#include <attograd/optim/optim.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::expect_error;
using optim::StateDict;

namespace {

const std::string kFixtures = std::string(ATTOGRAD_SOURCE_DIR) + "/tests/fixtures/optim/";

// |actual - expected| <= rtol * |expected| + atol, element by element; false
// (and one failure) at the first element that is not.
bool expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                  const std::string& what) {
  EXPECT_EQ(actual.shape(), expected.shape()) << what;
  if (actual.shape() != expected.shape()) return false;
  const auto a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(std::abs(a[i] - e[i]), rtol * std::abs(e[i]) + atol)
        << what << " element " << i << ": " << a[i] << " vs " << e[i];
    if (!(std::abs(a[i] - e[i]) <= rtol * std::abs(e[i]) + atol)) return false;
  }
  return true;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), ca.numel() * dtype_size(ca.dtype())) == 0;
}

Tensor leaf(const Tensor& values, DType dtype) {
  NoGradGuard g;
  return values.to(dtype).clone().requires_grad_();
}

// An optimizer as described by a fixture's metadata (torch.optim's arguments).
std::unique_ptr<optim::Optimizer> make_optimizer(const nlohmann::json& cfg, const std::vector<Tensor>& params) {
  const nlohmann::json& o = cfg["options"];
  std::vector<optim::ParamGroup> groups;
  if (cfg["groups"].is_null()) {
    groups.push_back({params, std::nullopt, std::nullopt});
  } else {
    for (const auto& g : cfg["groups"]) {
      optim::ParamGroup pg;
      for (int i : g["params"]) pg.params.push_back(params[i]);
      if (g.contains("lr")) pg.lr = g["lr"].get<double>();
      if (g.contains("weight_decay")) pg.weight_decay = g["weight_decay"].get<double>();
      groups.push_back(pg);
    }
  }
  const std::string kind = cfg["optimizer"];
  if (kind == "SGD") {
    optim::SGDOptions s;
    s.lr = o.value("lr", s.lr);
    s.momentum = o.value("momentum", 0.0);
    s.dampening = o.value("dampening", 0.0);
    s.nesterov = o.value("nesterov", false);
    s.weight_decay = o.value("weight_decay", 0.0);
    return std::make_unique<optim::SGD>(groups, s);
  }
  const std::vector<double> betas = o.value("betas", std::vector<double>{0.9, 0.999});
  optim::AdamOptions a;
  a.lr = o.value("lr", a.lr);
  a.beta1 = betas[0];
  a.beta2 = betas[1];
  a.eps = o.value("eps", a.eps);
  // Unset when the fixture leaves it to torch's default (Adam 0, AdamW 1e-2).
  if (o.contains("weight_decay")) a.weight_decay = o["weight_decay"].get<double>();
  a.amsgrad = o.value("amsgrad", false);
  if (kind == "Adam") return std::make_unique<optim::Adam>(groups, a);
  EXPECT_EQ(kind, "AdamW");
  return std::make_unique<optim::AdamW>(groups, a);
}

struct Fixture {
  SafetensorsData data = load_safetensors(kFixtures + "optimizers.safetensors");
  const Tensor& at(const std::string& k) const { return data.tensors.at(k); }
  size_t num_params() const {
    size_t n = 0;
    while (data.tensors.count("init." + std::to_string(n))) ++n;
    return n;
  }
};

// Replays a fixture config: the torch gradient sequence, checking every step.
// transform_param/transform_grad may turn the fixture's contiguous tensors into views.
template <class P, class G>
void replay(const Fixture& fx, const std::string& name, DType dtype, double rtol, double atol,
            P transform_param, G transform_grad) {
  SCOPED_TRACE(name);
  const auto cfg = nlohmann::json::parse(fx.data.metadata.at(name));
  const size_t n = fx.num_params();
  std::vector<Tensor> params;
  for (size_t i = 0; i < n; ++i) params.push_back(transform_param(leaf(fx.at("init." + std::to_string(i)), dtype)));
  auto opt = make_optimizer(cfg, params);
  const Tensor has_grad = fx.at("has_grad");  // i64 [steps, params]
  const int64_t steps = has_grad.size(0);
  for (int64_t k = 0; k < steps; ++k) {
    for (size_t i = 0; i < n; ++i) {
      const Tensor present = has_grad.slice(0, k, k + 1).squeeze(0).slice(0, i, i + 1);
      if (present.item() != 0)
        params[i].set_grad(transform_grad(fx.at("grad." + std::to_string(i)).slice(0, k, k + 1).squeeze(0).to(dtype)));
      else
        params[i].zero_grad();
    }
    opt->step();
    for (size_t i = 0; i < n; ++i) {
      const Tensor want = fx.at(name + ".param." + std::to_string(i)).slice(0, k, k + 1).squeeze(0);
      if (!expect_close(params[i], want, rtol, atol, fmt::format("step {} param {}", k + 1, i))) return;
    }
  }
}

std::vector<std::string> config_names(const Fixture& fx) {
  std::vector<std::string> names;
  for (const auto& [k, v] : fx.data.metadata) names.push_back(k);
  return names;
}

auto same = [](const Tensor& t) { return t; };

}  // namespace

// ---- against PyTorch ----------------------------------------------------------

TEST(OptimTorch, FixtureCoversEveryOptimizer) {
  Fixture fx;
  const auto names = config_names(fx);
  EXPECT_GE(names.size(), 10u);
  for (const char* want : {"sgd", "sgd_momentum", "sgd_nesterov", "adam", "adam_amsgrad",
                           "adam_weight_decay", "adamw", "adamw_amsgrad", "adamw_groups", "sgd_groups"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  // Some gradients are missing, so skipping is exercised.
  EXPECT_LT(sum(fx.at("has_grad").to(DType::f64)).item(), static_cast<double>(fx.at("has_grad").numel()));
}

TEST(OptimTorch, Float64TrajectoriesMatch) {
  Fixture fx;
  for (const std::string& name : config_names(fx)) replay(fx, name, DType::f64, 1e-6, 1e-12, same, same);
}

TEST(OptimTorch, Float32TrajectoriesMatchLoosely) {
  Fixture fx;
  for (const std::string& name : config_names(fx)) replay(fx, name, DType::f32, 1e-4, 1e-5, same, same);
}

TEST(OptimTorch, NonContiguousParametersAndGradients) {
  Fixture fx;
  // A leaf that is a transposed view: its storage is [d1, d0] for a [d0, d1] parameter.
  auto transposed_leaf = [](const Tensor& p) {
    if (p.dim() < 2) return p;
    NoGradGuard g;
    Tensor storage = p.transpose(0, p.dim() - 1).contiguous().clone();
    Tensor view = storage.transpose(0, p.dim() - 1).detach().requires_grad_();
    EXPECT_FALSE(view.is_contiguous());
    return view;
  };
  auto transposed_grad = [](const Tensor& g) {
    if (g.dim() < 2) return g;
    return g.transpose(0, g.dim() - 1).contiguous().transpose(0, g.dim() - 1);
  };
  for (const char* name : {"sgd_nesterov", "adam_amsgrad", "adamw_groups"}) {
    replay(fx, name, DType::f64, 1e-6, 1e-12, transposed_leaf, same);
    replay(fx, name, DType::f64, 1e-6, 1e-12, same, transposed_grad);
    replay(fx, name, DType::f64, 1e-6, 1e-12, transposed_leaf, transposed_grad);
  }
}

// ---- hand-computed steps ----------------------------------------------------

TEST(SGD, PlainStepByHand) {
  Tensor p = leaf(Tensor::from_list({1.0, -2.0}, {2}), DType::f64);
  optim::SGD opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  p.set_grad(Tensor::from_list({2.0, 4.0}, {2}, DType::f64));
  opt.step();
  // g + wd * p = {2.5, 3}; p - lr * that
  EXPECT_DOUBLE_EQ(p.to_vector<double>()[0], 1.0 - 0.1 * 2.5);
  EXPECT_DOUBLE_EQ(p.to_vector<double>()[1], -2.0 - 0.1 * 3.0);
}

TEST(SGD, MomentumFirstStepIsTheGradientThenDampened) {
  Tensor p = leaf(Tensor::from_list({0.0}, {1}), DType::f64);
  optim::SGD opt({p}, {.lr = 1.0, .momentum = 0.5, .dampening = 0.5});
  p.set_grad(Tensor::from_list({1.0}, {1}, DType::f64));
  opt.step();  // b = g = 1 (no dampening on the first step)
  EXPECT_DOUBLE_EQ(p.item(), -1.0);
  opt.step();  // b = 0.5 * 1 + 0.5 * 1 = 1
  EXPECT_DOUBLE_EQ(p.item(), -2.0);
  p.set_grad(Tensor::from_list({3.0}, {1}, DType::f64));
  opt.step();  // b = 0.5 * 1 + 0.5 * 3 = 2
  EXPECT_DOUBLE_EQ(p.item(), -4.0);
  EXPECT_DOUBLE_EQ(opt.state_dict().at("state.0.momentum_buffer").item(), 2.0);
}

TEST(SGD, NesterovStepByHand) {
  Tensor p = leaf(Tensor::from_list({0.0}, {1}), DType::f64);
  optim::SGD opt({p}, {.lr = 1.0, .momentum = 0.9, .nesterov = true});
  p.set_grad(Tensor::from_list({1.0}, {1}, DType::f64));
  opt.step();  // b = 1, step = g + 0.9 b = 1.9
  EXPECT_DOUBLE_EQ(p.item(), -1.9);
  opt.step();  // b = 0.9 + 1 = 1.9, step = 1 + 0.9 * 1.9
  EXPECT_DOUBLE_EQ(p.item(), -1.9 - (1 + 0.9 * 1.9));
}

TEST(Adam, FirstStepIsLrTimesSignOfGradient) {
  // Bias correction makes the first update lr * g / (|g| + eps).
  Tensor p = leaf(Tensor::from_list({1.0, 1.0, 1.0}, {3}), DType::f64);
  optim::Adam opt({p}, {.lr = 0.1, .eps = 1e-8});
  EXPECT_EQ(opt.param_groups()[0].weight_decay, 0.0);  // PyTorch's default, where AdamW's is 1e-2
  p.set_grad(Tensor::from_list({4.0, -0.5, 1e-3}, {3}, DType::f64));
  opt.step();
  const auto v = p.to_vector<double>();
  EXPECT_NEAR(v[0], 1.0 - 0.1 * 4.0 / (4.0 + 1e-8), 1e-15);
  EXPECT_NEAR(v[1], 1.0 + 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(v[2], 1.0 - 0.1 * 1e-3 / (1e-3 + 1e-8), 1e-15);
  EXPECT_EQ(opt.state_dict().at("state.0.step").item(), 1.0);
}

TEST(Adam, CoupledWeightDecayEntersTheMoments) {
  // Adam adds wd * p to g, so a zero gradient still moves p against its sign.
  Tensor p = leaf(Tensor::from_list({2.0}, {1}), DType::f64);
  optim::Adam opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  p.set_grad(Tensor::from_list({0.0}, {1}, DType::f64));
  opt.step();
  EXPECT_NEAR(p.item(), 2.0 - 0.1 * 1.0 / (1.0 + 1e-8), 1e-15);
  EXPECT_NEAR(opt.state_dict().at("state.0.exp_avg").item(), 0.1 * 1.0, 1e-15);
}

TEST(AdamW, DecoupledWeightDecayShrinksFirst) {
  Tensor p = leaf(Tensor::from_list({2.0}, {1}), DType::f64);
  optim::AdamW opt({p}, {.lr = 0.1});
  EXPECT_EQ(opt.param_groups()[0].weight_decay, 1e-2);  // PyTorch's default
  p.set_grad(Tensor::from_list({-3.0}, {1}, DType::f64));
  opt.step();
  EXPECT_NEAR(p.item(), 2.0 * (1 - 0.1 * 1e-2) + 0.1 * 3.0 / (3.0 + 1e-8), 1e-15);
  // The decay does not enter the moments.
  EXPECT_NEAR(opt.state_dict().at("state.0.exp_avg").item(), 0.1 * -3.0, 1e-15);
}

TEST(Adam, AmsgradKeepsTheMaximumSecondMoment) {
  Tensor p = leaf(Tensor::from_list({0.0}, {1}), DType::f64);
  optim::Adam opt({p}, {.lr = 0.1, .amsgrad = true});
  p.set_grad(Tensor::from_list({10.0}, {1}, DType::f64));
  opt.step();
  p.set_grad(Tensor::from_list({0.01}, {1}, DType::f64));
  opt.step();
  const StateDict sd = opt.state_dict();
  const double v = sd.at("state.0.exp_avg_sq").item(), vmax = sd.at("state.0.max_exp_avg_sq").item();
  EXPECT_NEAR(vmax, 0.001 * 100.0, 1e-12);  // after step 1
  EXPECT_LT(v, vmax);
  EXPECT_NEAR(v, 0.999 * 0.1 + 0.001 * 1e-4, 1e-12);
}

// ---- the Optimizer base -----------------------------------------------------

TEST(Optimizer, ParameterWithoutGradientIsSkipped) {
  Tensor a = leaf(Tensor::from_list({1.0, 2.0}, {2}), DType::f64);
  Tensor b = leaf(Tensor::from_list({3.0}, {1}), DType::f64);
  optim::Adam opt({a, b}, {.lr = 0.1, .weight_decay = 0.1});
  a.set_grad(Tensor::from_list({1.0, 1.0}, {2}, DType::f64));
  opt.step();
  opt.step();
  EXPECT_EQ(b.item(), 3.0);  // untouched, even by weight decay
  StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("state.0.step").item(), 2.0);
  EXPECT_EQ(sd.count("state.1.step"), 0u);
  b.set_grad(Tensor::from_list({1.0}, {1}, DType::f64));
  opt.step();
  sd = opt.state_dict();
  EXPECT_EQ(sd.at("state.0.step").item(), 3.0);
  EXPECT_EQ(sd.at("state.1.step").item(), 1.0);  // its own count starts at its first update
  EXPECT_NEAR(b.item(), 3.0 - 0.1 * 1.3 / (1.3 + 1e-8), 1e-14);
}

TEST(Optimizer, ZeroGradDropsGradients) {
  Tensor a = leaf(Tensor::from_list({1.0}, {1}), DType::f32);
  optim::SGD opt({a}, {.lr = 0.1});
  sum(a * a).backward();
  ASSERT_TRUE(a.grad().defined());
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt.step();  // nothing to do
  EXPECT_EQ(a.item(), 1.0);
}

TEST(Optimizer, LrAndGroups) {
  Tensor a = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  Tensor b = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, 0.5, std::nullopt}, {{b}, std::nullopt, 0.25}},
                 {.lr = 0.1, .weight_decay = 0.0});
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_EQ(opt.param_groups()[1].lr, 0.1);
  EXPECT_EQ(opt.param_groups()[1].weight_decay, 0.25);
  a.set_grad(Tensor::from_list({1.0}, {1}, DType::f64));
  b.set_grad(Tensor::from_list({1.0}, {1}, DType::f64));
  opt.step();
  EXPECT_DOUBLE_EQ(a.item(), 0.5);
  EXPECT_DOUBLE_EQ(b.item(), 1.0 - 0.1 * 1.25);
  opt.set_lr(0.0);
  EXPECT_EQ(opt.param_groups()[1].lr, 0.0);
  opt.step();
  EXPECT_DOUBLE_EQ(a.item(), 0.5);
  opt.param_group(1).lr = 1.0;
  opt.step();
  EXPECT_DOUBLE_EQ(b.item(), 1.0 - 0.1 * 1.25 - (1.0 + 0.25 * (1.0 - 0.1 * 1.25)));
  expect_error<IndexError>([&] { opt.param_group(2); }, {"SGD", "param_group 2", "2 groups"});

  Tensor c = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  opt.add_param_group({{c}, std::nullopt, std::nullopt});
  EXPECT_EQ(opt.num_params(), 3u);
  EXPECT_EQ(opt.param_groups()[2].lr, 0.1);
  expect_error<ValueError>([&] { opt.add_param_group({{a}, std::nullopt, std::nullopt}); },
                           {"SGD", "more than once"});
}

TEST(Optimizer, ConstructorErrors) {
  Tensor a = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  expect_error<ValueError>([] { optim::SGD(std::vector<Tensor>{}, {}); }, {"SGD", "empty parameter list"});
  expect_error<ValueError>([&] { optim::SGD({a}, {.lr = -1}); }, {"SGD", "invalid lr -1"});
  expect_error<ValueError>([&] { optim::SGD({a}, {.momentum = -0.5}); }, {"SGD", "momentum"});
  expect_error<ValueError>([&] { optim::SGD({a}, {.nesterov = true}); }, {"SGD", "Nesterov"});
  expect_error<ValueError>([&] { optim::SGD({a}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
                           {"SGD", "dampening == 0"});
  expect_error<ValueError>([&] { optim::Adam({a}, {.beta1 = 1.0}); }, {"Adam", "beta1", "[0, 1)"});
  expect_error<ValueError>([&] { optim::AdamW({a}, {.beta2 = -0.1}); }, {"AdamW", "beta2"});
  expect_error<ValueError>([&] { optim::Adam({a}, {.eps = -1e-8}); }, {"Adam", "eps"});
  expect_error<ValueError>([&] { optim::AdamW({a}, {.weight_decay = -1}); }, {"AdamW", "weight_decay"});
  expect_error<ValueError>([&] { optim::SGD({a, a}, {}); }, {"SGD", "parameter 1 of group 0", "more than once"});
  const Tensor nonleaf = a * 2.0;
  expect_error<ValueError>([&] { optim::SGD({nonleaf}, {}); }, {"SGD", "non-leaf", "mul"});
  expect_error<DTypeError>([] { optim::Adam({Tensor::zeros({2}, DType::i64)}, {}); }, {"Adam", "i64"});
  expect_error<ValueError>([] { optim::Adam({Tensor()}, {}); }, {"Adam", "undefined"});
  optim::SGD opt({a}, {});
  expect_error<ValueError>([&] { opt.set_lr(-0.1); }, {"SGD", "lr"});
}

// ---- convergence --------------------------------------------------------------

TEST(Convergence, AdamMinimizesRosenbrock) {
  // f(x, y) = (1 - x)^2 + 100 (y - x^2)^2, minimum 0 at (1, 1).
  Tensor x = leaf(Tensor::scalar(-1.5), DType::f64);
  Tensor y = leaf(Tensor::scalar(2.0), DType::f64);
  optim::Adam opt({x, y}, {.lr = 0.02});
  double f = 0;
  for (int k = 0; k < 3000; ++k) {
    Tensor a = 1.0 - x, b = y - x * x;
    Tensor loss = a * a + 100.0 * b * b;
    f = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_LT(f, 1e-8);
  EXPECT_NEAR(x.item(), 1.0, 1e-3);
  EXPECT_NEAR(y.item(), 1.0, 1e-3);
}

TEST(Convergence, SGDMomentumFitsLeastSquares) {
  // min_w mean((A w - b)^2) with b = A w_true: A [N, 3], w [3].
  Generator gen(11);
  const Tensor A = Tensor::randn({32, 3}, gen, DType::f64);
  const Tensor w_true = Tensor::from_list({1.5, -2.0, 0.5}, {3}, DType::f64);
  const Tensor b = sum(A * w_true, {1});
  Tensor w = leaf(Tensor::zeros({3}), DType::f64);
  optim::SGD opt({w}, {.lr = 0.05, .momentum = 0.9});
  double first = 0, last = 0;
  for (int k = 0; k < 300; ++k) {
    Tensor r = sum(A * w, {1}) - b;
    Tensor loss = mean(r * r);
    if (k == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 1e-10);
  expect_close(w, w_true, 0, 1e-5, "w");
}

// ---- state_dict ---------------------------------------------------------------

TEST(StateDict, LayoutAndDeepCopy) {
  Tensor a = leaf(Tensor::from_list({1, 2, 3, 4, 5, 6}, {2, 3}), DType::f32);
  Tensor b = leaf(Tensor::from_list({1}, {1}), DType::f32);
  optim::AdamW opt(std::vector<optim::ParamGroup>{{{a}, std::nullopt, std::nullopt}, {{b}, 0.5, 0.0}},
                   {.lr = 0.1, .amsgrad = true});
  a.set_grad(Tensor::ones({2, 3}));
  opt.step();
  const StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("state.0.step").dtype(), DType::i64);
  EXPECT_EQ(sd.at("state.0.step").dim(), 0);
  EXPECT_EQ(sd.at("state.0.step").item(), 1.0);
  for (const char* slot : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    const Tensor& t = sd.at(std::string("state.0.") + slot);
    EXPECT_EQ(t.shape(), (Shape{2, 3})) << slot;
    EXPECT_EQ(t.dtype(), DType::f32) << slot;
  }
  EXPECT_EQ(sd.count("state.1.step"), 0u);
  EXPECT_EQ(sd.at("param_groups.1.lr").item(), 0.5);
  EXPECT_EQ(sd.at("param_groups.1.lr").dtype(), DType::f64);
  EXPECT_EQ(sd.at("param_groups.0.weight_decay").item(), 1e-2);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), std::vector<int64_t>{1});
  EXPECT_EQ(sd.at("options.amsgrad").item(), 1.0);
  EXPECT_EQ(sd.at("options.beta2").item(), 0.999);
  EXPECT_EQ(sd.size(), 6u + 4u + 4u);  // 2 groups x 3, 4 options, 4 slots
  // A deep copy: later steps leave it alone.
  const std::vector<float> m = sd.at("state.0.exp_avg").to_vector<float>();
  opt.step();
  EXPECT_EQ(sd.at("state.0.exp_avg").to_vector<float>(), m);
  EXPECT_EQ(sd.at("state.0.step").item(), 1.0);
}

namespace {

// Trains params with gradients of sum((p - target_k)^2 * w), target_k from step k.
void train(optim::Optimizer& opt, optim::Schedule& sched, std::vector<Tensor>& params, int from, int to) {
  for (int k = from; k < to; ++k) {
    Generator gen(1000 + k);
    opt.zero_grad();
    Tensor loss;
    for (size_t i = 0; i < params.size(); ++i) {
      if ((k + i) % 5 == 3) continue;  // sometimes a parameter gets no gradient
      const Tensor target = Tensor::randn(params[i].shape(), gen, params[i].dtype());
      const Tensor d = params[i] - target;
      const Tensor li = sum(d * d * (1.0 + 0.5 * static_cast<double>(i)));
      loss = loss.defined() ? loss + li : li;
    }
    loss.backward();
    sched.step(opt);
    opt.step();
  }
}

template <class Make>
void check_resume(Make make, DType dtype, const std::string& label) {
  SCOPED_TRACE(label);
  auto init = [&] {
    Generator gen(5);
    std::vector<Tensor> ps;
    for (const Shape& s : {Shape{4, 3}, Shape{7}, Shape{2, 2, 2}}) ps.push_back(leaf(Tensor::randn(s, gen), dtype));
    return ps;
  };
  const int n1 = 6, n2 = 9;
  // Uninterrupted.
  std::vector<Tensor> ref = init();
  auto opt_ref = make(ref);
  optim::Noam sched_ref(16, 4, 2.0);
  train(*opt_ref, sched_ref, ref, 0, n1 + n2);

  // Stopped after n1 steps, saved to a file with the parameters, restored into new objects.
  std::vector<Tensor> ps = init();
  {
    auto opt = make(ps);
    optim::Noam sched(16, 4, 2.0);
    train(*opt, sched, ps, 0, n1);
    TensorMap file = opt->state_dict();
    for (size_t i = 0; i < ps.size(); ++i) file["model." + std::to_string(i)] = ps[i].detach();
    file["schedule.last_step"] = Tensor::scalar(static_cast<double>(sched.last_step()), DType::i64);
    save_safetensors(::testing::TempDir() + "attograd_optim_resume.safetensors", file);
  }
  SafetensorsData loaded = load_safetensors(::testing::TempDir() + "attograd_optim_resume.safetensors");
  std::vector<Tensor> resumed;
  StateDict sd;
  for (auto& [k, t] : loaded.tensors)
    if (k.rfind("model.", 0) != 0 && k.rfind("schedule.", 0) != 0) sd[k] = t;
  for (size_t i = 0; i < ps.size(); ++i) resumed.push_back(leaf(loaded.tensors.at("model." + std::to_string(i)), dtype));
  auto opt = make(resumed);
  opt->load_state_dict(sd);
  optim::Noam sched(16, 4, 2.0);
  sched.set_last_step(static_cast<int64_t>(loaded.tensors.at("schedule.last_step").item()));
  train(*opt, sched, resumed, n1, n1 + n2);

  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(bit_equal(resumed[i], ref[i])) << "param " << i << "\n" << fmt::format("{}\n{}", resumed[i], ref[i]);
    EXPECT_FALSE(bit_equal(resumed[i], init()[i])) << "param " << i << " never moved";
  }
  const StateDict a = opt->state_dict(), b = opt_ref->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, t] : b) EXPECT_TRUE(bit_equal(a.at(k), t)) << k;
}

}  // namespace

TEST(StateDict, ResumeIsBitIdentical) {
  for (DType dtype : {DType::f64, DType::f32}) {
    const std::string d(dtype_name(dtype));
    check_resume([](std::vector<Tensor>& p) {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-3});
    }, dtype, "SGD nesterov " + d);
    check_resume([](std::vector<Tensor>& p) {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
    }, dtype, "SGD dampening " + d);
    check_resume([](std::vector<Tensor>& p) {
      return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.1, .weight_decay = 1e-2, .amsgrad = true});
    }, dtype, "Adam amsgrad " + d);
    check_resume([](std::vector<Tensor>& p) {
      return std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup>{{{p[0], p[2]}, std::nullopt, 0.1}, {{p[1]}, std::nullopt, std::nullopt}},
          optim::AdamOptions{.lr = 0.1});
    }, dtype, "AdamW groups " + d);
  }
}

TEST(StateDict, LoadRestoresLrAndWeightDecay) {
  Tensor a = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  optim::SGD src({a}, {.lr = 0.1, .weight_decay = 0.2});
  src.set_lr(0.037);
  Tensor b = leaf(Tensor::from_list({1.0}, {1}), DType::f64);
  optim::SGD dst({b}, {.lr = 0.5});
  dst.load_state_dict(src.state_dict());
  EXPECT_EQ(dst.lr(), 0.037);
  EXPECT_EQ(dst.param_groups()[0].weight_decay, 0.2);
}

TEST(StateDict, LoadErrorsNameTheKeyAndChangeNothing) {
  Tensor a = leaf(Tensor::from_list({1, 2, 3, 4}, {2, 2}), DType::f64);
  Tensor b = leaf(Tensor::from_list({1, 2}, {2}), DType::f64);
  optim::Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(Tensor::ones({2, 2}, DType::f64));
  b.set_grad(Tensor::ones({2}, DType::f64));
  opt.step();
  const StateDict good = opt.state_dict();

  auto with = [&](const std::string& key, const Tensor& t) { StateDict d = good; d[key] = t; return d; };
  auto without = [&](const std::string& key) { StateDict d = good; d.erase(key); return d; };

  Tensor c = leaf(Tensor::from_list({0, 0, 0, 0}, {2, 2}), DType::f64);
  Tensor e = leaf(Tensor::from_list({0, 0}, {2}), DType::f64);
  optim::Adam fresh({c, e}, {.lr = 0.3});
  auto load = [&](const StateDict& d) { return [&fresh, d] { fresh.load_state_dict(d); }; };

  expect_error<ValueError>(load(without("state.1.exp_avg_sq")), {"Adam.load_state_dict", "missing key 'state.1.exp_avg_sq'"});
  expect_error<ValueError>(load(without("param_groups.0.lr")), {"missing key 'param_groups.0.lr'"});
  expect_error<ValueError>(load(with("state.0.bogus", Tensor::zeros({2, 2}, DType::f64))), {"unexpected key 'state.0.bogus'", "exp_avg_sq"});
  expect_error<ValueError>(load(with("state.2.step", Tensor::zeros({}, DType::i64))), {"unexpected key 'state.2.step'", "2 parameters"});
  expect_error<ValueError>(load(with("momentum", Tensor::zeros({}, DType::f64))), {"unexpected key 'momentum'"});
  expect_error<ShapeError>(load(with("state.0.exp_avg", Tensor::zeros({4}, DType::f64))), {"'state.0.exp_avg'", "shape [4]", "expected [2, 2]"});
  expect_error<DTypeError>(load(with("state.1.exp_avg", Tensor::zeros({2}, DType::f32))), {"'state.1.exp_avg'", "f32", "expected f64"});
  expect_error<DTypeError>(load(with("state.0.step", Tensor::zeros({}, DType::f64))), {"'state.0.step'", "expected i64"});
  expect_error<ValueError>(load(with("state.0.step", Tensor::scalar(-3, DType::i64))), {"'state.0.step'", "negative"});
  expect_error<ValueError>(load(with("options.beta1", Tensor::scalar(0.5, DType::f64))), {"'options.beta1'", "0.5", "0.9"});
  expect_error<ValueError>(load(with("param_groups.0.lr", Tensor::scalar(-1, DType::f64))), {"'param_groups.0.lr'", "-1"});
  expect_error<ValueError>(load(with("param_groups.0.params", Tensor::from_vector(std::vector<int64_t>{0}, {1}))), {"'param_groups.0.params'", "lists 1 parameters", "has 2"});
  expect_error<ShapeError>(load(with("param_groups.0.params", Tensor::from_vector(std::vector<int64_t>{0, 1}, {1, 2}))), {"'param_groups.0.params'", "shape [1, 2]"});
  expect_error<ValueError>(load(with("param_groups.0.params", Tensor::from_vector(std::vector<int64_t>{1, 0}, {2}))), {"'param_groups.0.params'", "ordered differently"});

  // Nothing changed in the optimizer that refused them.
  EXPECT_EQ(fresh.lr(), 0.3);
  EXPECT_EQ(fresh.state_dict().count("state.0.step"), 0u);

  // A different optimizer's dict: SGD has other options and slots.
  optim::SGD sgd({c, e}, {.lr = 0.1, .momentum = 0.9});
  expect_error<ValueError>([&] { sgd.load_state_dict(good); }, {"SGD.load_state_dict", "options.momentum"});
  // Another group layout.
  optim::Adam one_each(std::vector<optim::ParamGroup>{{{c}, std::nullopt, std::nullopt}, {{e}, std::nullopt, std::nullopt}}, {.lr = 0.1});
  expect_error<ValueError>([&] { one_each.load_state_dict(good); }, {"'param_groups.0.params' lists 2 parameters", "group 0", "has 1"});
}
