// Higher-order gradients: grad() and backward(create_graph) record the
// backward pass; gradgradcheck passes for every op family (through a
// nonlinearity, so each op's backward is itself differentiated); it catches
// a custom op whose backward is right but not differentiable, which gradcheck
// passes; and two real uses, a Hessian-vector product and a gradient
// penalty, match their closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>

#include "test_util.h"

using namespace attograd;
using namespace attograd::testing;

namespace {

// gradgradcheck passes with its default tolerances and checked every input
// that requires grad.
void expect_gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckReport r = gradgradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.summary();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) {
      EXPECT_TRUE(r.inputs.at(i).checked) << "input " << i;
    }
}

// t ⊙ tanh(t): smooth and nonlinear, so an op under it has its backward
// differentiated with a gradient that depends on the inputs.
Tensor bend(const Tensor& t) { return t * tanh(t); }

Tensor mask(std::vector<bool> m, const Shape& s) { return Tensor::from_vector(m, s); }

}  // namespace

// ---- the engine: grad(), backward(create_graph) ---------------------------------

TEST(Grad, ReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = f64({1, 2, 3}, {3}).requires_grad_(), w = f64({0.5, -1, 2}, {3}).requires_grad_();
  const Tensor y = sum(x * x * w);
  const std::vector<Tensor> g = grad({y}, {x, w});
  expect_near_all(vals(g[0]), {1, -4, 12});  // 2 x w
  expect_near_all(vals(g[1]), {1, 4, 9});    // x²
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());  // no create_graph: plain values
}

TEST(Grad, NonLeafInputsAndSeveralOutputs) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  const Tensor h = x * 3.0;  // an interior tensor
  const Tensor y1 = sum(h * h), y2 = h * 2.0;
  const std::vector<Tensor> g = grad({y1, y2}, {h, x}, {Tensor::ones({}, DType::f64), f64({1, 10}, {2})});
  expect_near_all(vals(g[0]), {2 * 3 + 2, 2 * 6 + 20});      // 2h + 2·[1, 10]
  expect_near_all(vals(g[1]), {3 * (6 + 2), 3 * (12 + 20)});  // through h = 3x
}

TEST(Grad, UnusedInputIsAnErrorUnlessAllowed) {
  Tensor x = f64({1, 2}, {2}).requires_grad_(), z = f64({5}, {1}).requires_grad_();
  const Tensor y = sum(x * x);
  expect_error<AutogradError>([&] { grad({y}, {x, z}, {}, {.retain_graph = true}); },
                              {"grad", "input 1", "not used", "allow_unused"});
  const std::vector<Tensor> g = grad({y}, {x, z}, {}, {.allow_unused = true});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  expect_error<AutogradError>([&] { grad({sum(x)}, {f64({1}, {1})}); }, {"grad", "input 0", "does not require grad"});
  expect_error<ValueError>([&] { grad({sum(x), sum(x)}, {x}, {Tensor::ones({}, DType::f64)}); },
                           {"grad", "1 grad_outputs for 2 outputs"});
}

TEST(Grad, CreateGraphGivesDifferentiableGradients) {
  Tensor x = f64({0.5, -1.5}, {2}).requires_grad_();
  const Tensor y = sum(x * x * x);  // y = Σ x³
  const Tensor dy = grad({y}, {x}, {}, {.create_graph = true})[0];  // 3x²
  expect_near_all(vals(dy), {0.75, 6.75});
  ASSERT_TRUE(dy.requires_grad());
  const Tensor d2y = grad({sum(dy)}, {x})[0];  // 6x
  expect_near_all(vals(d2y), {3, -9});
}

TEST(Backward, CreateGraphLeavesADifferentiableDotGrad) {
  Tensor x = f64({2, -1}, {2}).requires_grad_();
  sum(exp(x) * x).backward({}, false, /*create_graph=*/true);  // .grad = eˣ (x + 1)
  const Tensor g = x.grad();
  ASSERT_TRUE(g.requires_grad());
  expect_near_all(vals(g), {std::exp(2.0) * 3, 0.0});
  x.zero_grad();
  sum(g).backward();  // d/dx eˣ (x + 1) = eˣ (x + 2)
  expect_near_all(vals(x.grad()), {std::exp(2.0) * 4, std::exp(-1.0)}, 1e-12);
}

TEST(Backward, PlainBackwardStillFreesTheGraph) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  const Tensor y = sum(tanh(x));
  y.backward();
  expect_error<AutogradError>([&] { y.backward(); }, {"second time", "retain_graph"});
}

// ---- gradgradcheck per op family ------------------------------------------------

TEST(GradGradcheck, ElementwiseBinary) {
  Tensor a = uniform_leaf({2, 3}, 1, 0.5, 2), b = uniform_leaf({3}, 2, 0.5, 2);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(in[0] + in[1]) - in[1] * in[0]; }, {a, b});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1] * in[0] / in[1].unsqueeze(0); }, {a, b});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {a, b});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return pow(in[0], 3.0) - pow(in[0], 0.5); }, {a});
}

TEST(GradGradcheck, ElementwiseUnary) {
  Tensor x = uniform_leaf({2, 3}, 3, 0.3, 2), s = uniform_leaf({2, 3}, 4, -2, 2);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return exp(in[0]) + log(in[0]) + sqrt(in[0]) - in[0]; }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]) * sigmoid(in[0]); }, {s});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return gelu(in[0]) + gelu(in[0], GeluApprox::tanh); }, {s});
  // Piecewise ops: their mask is a constant; under x² the backward still depends on x.
  Tensor u = f64({-1.5, -0.7, 0.4, 1.2, 1.9, -0.2}, {2, 3}).requires_grad_();
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return relu(in[0]) * in[0] + abs(in[0]) * in[0]; }, {u});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return clamp(in[0], -1.0, 1.0) * in[0]; }, {u});
}

TEST(GradGradcheck, WhereAndMaskedFill) {
  Tensor a = uniform_leaf({2, 3}, 5), b = uniform_leaf({3}, 6);
  const Tensor c = mask({true, false, true, false, false, true}, {2, 3});
  expect_gradgradcheck([c](const std::vector<Tensor>& in) { return bend(where(c, in[0], in[1])); }, {a, b});
  expect_gradgradcheck([c](const std::vector<Tensor>& in) { return bend(masked_fill(in[0], c, 0.5)); }, {a});
}

TEST(GradGradcheck, Reductions) {
  Tensor x = uniform_leaf({3, 4}, 7);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(sum(in[0], {1})) + bend(mean(in[0])); }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return var(in[0], {0}) + bend(var(in[0])); }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(max(in[0], 1).values) + bend(max(in[0])); }, {x});
}

TEST(GradGradcheck, ShapeOps) {
  Tensor x = uniform_leaf({2, 3, 4}, 8), y = uniform_leaf({2, 3, 4}, 9);
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    return bend(in[0].reshape({6, 4}).transpose(0, 1)) + bend(in[0].permute({2, 0, 1})).reshape({4, 6});
  }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    const Tensor n = sum(in[0].narrow(1, 1, 2), {1}, true).expand({2, 3, 4});
    return bend(in[0].slice(2, 0, 4, 2)) + bend(n).slice(2, 1, 3) + bend(in[0].unsqueeze(0).squeeze(0)).slice(2, 0, 2);
  }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    return bend(cat({in[0], in[1]}, 1)).slice(1, 0, 3) + sum(bend(stack({in[0], in[1]}, 0)), {0}) +
           bend(in[0].clone()) + bend(in[1].transpose(0, 2).contiguous()).transpose(0, 2);
  }, {x, y});
}

TEST(GradGradcheck, Indexing) {
  Tensor x = uniform_leaf({4, 3}, 10), table = uniform_leaf({5, 2}, 11);
  const Tensor idx = ids({2, 0, 2}, {3}), tokens = ids({1, 4, 0, 1}, {2, 2}), gidx = ids({0, 2, 1, 0, 0, 2}, {2, 3});
  expect_gradgradcheck([idx](const std::vector<Tensor>& in) { return bend(index_select(in[0], 0, idx)); }, {x});
  expect_gradgradcheck([idx](const std::vector<Tensor>& in) { return bend(index_select(in[0], 1, idx)); }, {x});
  expect_gradgradcheck([tokens](const std::vector<Tensor>& in) { return bend(embedding(in[0], tokens, 1)); }, {table});
  expect_gradgradcheck([gidx](const std::vector<Tensor>& in) { return bend(gather(in[0], 1, gidx)); }, {x});
}

TEST(GradGradcheck, Matmul) {
  Tensor a = uniform_leaf({2, 3, 4}, 12), b = uniform_leaf({4, 2}, 13), v = uniform_leaf({4}, 14);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(matmul(in[0], in[1])); }, {a, b});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(matmul(in[0], in[1])); }, {a, v});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(matmul(in[1], in[0].transpose(1, 2))); }, {a, v});
  Tensor w = uniform_leaf({5, 4}, 15), bias = uniform_leaf({5}, 16);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(linear(in[0], in[1], in[2])); }, {a, w, bias});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(linear(in[0].transpose(0, 1), in[1])); }, {a, w});
}

TEST(GradGradcheck, Dropout) {
  Tensor x = uniform_leaf({3, 4}, 17);
  // A fresh generator per call: every evaluation draws the same mask.
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    Generator gen(3);
    return bend(dropout(bend(in[0]), 0.4, /*train=*/true, gen));
  }, {x});
}

TEST(GradGradcheck, SoftmaxAndLogSoftmax) {
  Tensor x = uniform_leaf({3, 4}, 18);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(softmax(in[0], -1)) + bend(softmax(in[0], 0)); }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(log_softmax(in[0], 1)) + bend(log_softmax(in[0], 0)); }, {x});
}

TEST(GradGradcheck, Losses) {
  Tensor x = uniform_leaf({4, 5}, 19), y = uniform_leaf({4, 5}, 20);
  const Tensor t = ids({1, 4, -100, 0}, {4});
  CrossEntropyOptions smooth{.ignore_index = -100, .label_smoothing = 0.1};
  expect_gradgradcheck([t, smooth](const std::vector<Tensor>& in) { return cross_entropy(in[0], t, smooth); }, {x});
  expect_gradgradcheck([t](const std::vector<Tensor>& in) {
    return cross_entropy(bend(in[0]), t, {.reduction = Reduction::none}) * 1.5 + 0.0;
  }, {x});
  expect_gradgradcheck([t](const std::vector<Tensor>& in) { return nll_loss(log_softmax(in[0], 1), t); }, {x});
  expect_gradgradcheck([t](const std::vector<Tensor>& in) {
    return nll_loss(bend(in[0]), t, {.reduction = Reduction::none}) + nll_loss(bend(in[0]), t, {.reduction = Reduction::sum});
  }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return mse_loss(bend(in[0]), in[1]); }, {x, y});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], bend(in[1]), Reduction::none); }, {x, y});
}

TEST(GradGradcheck, LayerNorm) {
  Tensor x = uniform_leaf({3, 4}, 21), w = uniform_leaf({4}, 22), b = uniform_leaf({4}, 23);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(layer_norm(in[0], {4}, in[1], in[2])); }, {x, w, b});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(layer_norm(in[0], {3, 4})); }, {x});
}

TEST(GradGradcheck, Attention) {
  Tensor q = uniform_leaf({1, 2, 3, 2}, 24), k = uniform_leaf({1, 2, 4, 2}, 25), v = uniform_leaf({1, 2, 4, 3}, 26);
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    return bend(scaled_dot_product_attention(in[0], in[1], in[2], {.is_causal = true}).out);
  }, {q, k, v});
  Tensor m = uniform_leaf({3, 4}, 27, -1, 1);
  const Tensor pad = mask({false, false, false, true}, {1, 4});
  expect_gradgradcheck([pad](const std::vector<Tensor>& in) {
    AttentionOptions o{.attn_mask = in[3], .key_padding_mask = pad};
    return bend(scaled_dot_product_attention(in[0], in[1], in[2], o).out);
  }, {q, k, v, m});
  expect_gradgradcheck([](const std::vector<Tensor>& in) {
    Generator gen(5);
    AttentionOptions o{.dropout_p = 0.3, .generator = &gen};
    return bend(scaled_dot_product_attention(in[0], in[1], in[2], o).out);
  }, {q, k, v});
}

// ---- custom ops ---------------------------------------------------------------------

namespace {

// out = x², backward in differentiable ops: its own derivative is right.
struct Square : Function<Square> {
  static constexpr const char* name = "square";
  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    ctx.save_for_backward({in[0]});
    return in[0] * in[0];
  }
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    // out = x²  =>  dx = 2 x grad
    return {grad * ctx.saved(0) * 2.0};
  }
};

// The planted bug: out = x², backward 2 x grad computed right but in a raw
// loop over the data, so it has no graph: d(dx)/dx reads as 0 instead of 2 grad.
struct RawSquare : Function<RawSquare> {
  static constexpr const char* name = "raw_square";
  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    ctx.save_for_backward({in[0]});
    return in[0] * in[0];
  }
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    // out = x²  =>  dx = 2 x grad
    const Tensor x = ctx.saved(0).contiguous(), g = grad.contiguous();
    Tensor dx = Tensor::empty(x.shape(), x.dtype());
    for (int64_t i = 0; i < x.numel(); ++i) dx.data<double>()[i] = 2 * x.data<double>()[i] * g.data<double>()[i];
    return {dx};
  }
};

// out = exp(x), saving its output: the saved output rejoins the graph.
struct Exp : Function<Exp> {
  static constexpr const char* name = "custom_exp";
  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    Tensor y = exp(in[0]);
    ctx.save_for_backward({y});
    return y;
  }
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    // out = eˣ  =>  dx = grad out
    return {grad * ctx.saved(0)};
  }
};

}  // namespace

TEST(GradGradcheck, CustomFunctionsSavingInputsOrOutput) {
  Tensor x = uniform_leaf({2, 3}, 28);
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(Square{}(in[0])); }, {x});
  expect_gradgradcheck([](const std::vector<Tensor>& in) { return bend(Exp{}(in[0])); }, {x});
}

TEST(GradGradcheck, CatchesABackwardThatIsNotDifferentiable) {
  Tensor x = uniform_leaf({2, 3}, 29, 0.5, 2);
  const GradcheckFn f = [](const std::vector<Tensor>& in) { return RawSquare{}(in[0]); };
  const GradcheckReport first = gradcheck(f, {x});
  EXPECT_TRUE(first.ok) << first.summary();
  const GradcheckReport second = gradgradcheck(f, {x});
  EXPECT_FALSE(second.ok);
  ASSERT_EQ(second.inputs.size(), 1u);
  EXPECT_FALSE(second.inputs[0].ok);
  EXPECT_EQ(second.inputs[0].analytical, 0.0);  // the raw loop's result has no graph
  EXPECT_NE(second.inputs[0].numerical, 0.0);   // h = Σ 2 x u v: ∂h/∂x = 2 u v
  const std::string s = second.summary();
  EXPECT_TRUE(contains(s, "gradgradcheck FAILED")) << s;
  EXPECT_TRUE(contains(s, "input 0")) << s;
  expect_error<GradcheckError>([&] { gradgradcheck(f, {x}, {.raise_on_failure = true}); }, {"gradgradcheck"});
}

// ---- real uses ----------------------------------------------------------------------

// Hessian-vector product of f(x) = ½ ‖W x‖² + Σ eˣ: H v = Wᵀ W v + eˣ ⊙ v,
// by differentiating <∇f, v> (double backward), against the closed form.
TEST(HigherOrder, HessianVectorProductMatchesClosedForm) {
  const Tensor W = randn({3, 4}, 30);
  Tensor x = randn_leaf({4}, 31);
  const Tensor v = randn({4}, 32);
  const Tensor Wx = matmul(W, x);
  const Tensor f = sum(Wx * Wx) * 0.5 + sum(exp(x));
  const Tensor g = grad({f}, {x}, {}, {.create_graph = true})[0];
  const Tensor hv = grad({sum(g * v)}, {x})[0];
  NoGradGuard no_grad;
  const Tensor want = matmul(W.transpose(0, 1), matmul(W, v)) + exp(x) * v;
  expect_near_all(vals(hv), vals(want), 1e-10);
}

// Gradient penalty: L(x, W) = ½ ‖x Wᵀ‖² gives ∂L/∂x = x WᵀW, so the penalty
// P = ‖∂L/∂x‖² has ∂P/∂x = 2 (x WᵀW) WᵀW (closed form); ∂P/∂W is checked
// against central differences; a few SGD steps on W lower P.
TEST(HigherOrder, GradientPenaltyMatchesClosedFormAndTrains) {
  Tensor x = randn_leaf({1, 4}, 33);
  Tensor W = randn_leaf({3, 4}, 34);
  auto penalty = [&] {
    const Tensor y = matmul(x, W.transpose(0, 1));
    const Tensor L = sum(y * y) * 0.5;
    const Tensor dLdx = grad({L}, {x}, {}, {.create_graph = true})[0];
    return sum(dLdx * dLdx);
  };
  const Tensor P = penalty();
  const Tensor dPdx = grad({P}, {x}, {}, {.retain_graph = true})[0];
  {
    NoGradGuard no_grad;
    const Tensor WtW = matmul(W.transpose(0, 1), W);
    expect_near_all(vals(dPdx), vals(matmul(matmul(x, WtW), WtW) * 2.0), 1e-10);
  }
  // The penalty's gradient with respect to W, against central differences.
  expect_gradcheck([&](const std::vector<Tensor>& in) {
    GradModeGuard on(true);  // gradcheck evaluates without grad mode; the inner grad needs it
    const Tensor y = matmul(x, in[0].transpose(0, 1));
    const Tensor dLdx = grad({sum(y * y) * 0.5}, {x}, {}, {.create_graph = true})[0];
    return sum(dLdx * dLdx);
  }, {W});
  // Train W on the penalty alone for a few SGD steps: it falls every step.
  double last = P.item();
  for (int step = 0; step < 5; ++step) {
    W.zero_grad();
    const Tensor p = penalty();
    p.backward();
    {
      NoGradGuard no_grad;
      W.set_data_(W - W.grad() * 0.002);
    }
    const double now = penalty().item();
    EXPECT_LT(now, last) << "step " << step;
    last = now;
  }
}
