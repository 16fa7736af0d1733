// gradcheck, the public API: it passes correct ops and catches wrong custom
// backwards (both Function forms), naming the input, the worst element and
// both values; it catches non-deterministic and non-linear backwards; and it
// guards its own preconditions (float64, no overlapping memory).
#include <gtest/gtest.h>

#include <cmath>

#include <attograd/autograd/autograd.h>

using namespace attograd;

namespace {

template <class E, class F>
std::string expect_error(F&& f, std::initializer_list<std::string_view> parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (std::string_view p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

Tensor leaf(const Shape& s, uint64_t seed, double lo = 0.5, double hi = 2.0) {
  Generator g(seed);
  return Tensor::uniform(s, lo, hi, g, DType::f64).requires_grad_();
}

// out = x², with an optional mistake: the gradient of one element is doubled.
struct Square : Function<Square> {
  static constexpr const char* name = "square";
  int64_t wrong_element = -1;
  Tensor forward(FunctionCtx& ctx, const std::vector<Tensor>& in) const {
    ctx.save_for_backward({in[0]});
    return in[0] * in[0];
  }
  std::vector<Tensor> backward(FunctionCtx& ctx, const Tensor& grad) const {
    // out = x²  =>  dx = 2 x grad
    Tensor dx = (grad * ctx.saved(0) * 2.0).contiguous();
    if (wrong_element >= 0) dx.data<double>()[wrong_element] *= 2;
    return {dx};
  }
};

// out = a * b via custom_op (lambda form); `wrong_b` scales db by 1.5.
Tensor custom_mul(const Tensor& a, const Tensor& b, bool wrong_b) {
  return custom_op(
      "custom_mul", {a, b},
      [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({in[0], in[1]});
        return in[0] * in[1];
      },
      [wrong_b](FunctionCtx& ctx, const Tensor& grad) {
        // out = a * b  =>  da = grad * b,  db = grad * a
        std::vector<Tensor> g(2);
        if (ctx.needs_input_grad(0)) g[0] = grad * ctx.saved(1);
        if (ctx.needs_input_grad(1)) g[1] = grad * ctx.saved(0) * (wrong_b ? 1.5 : 1.0);
        return g;
      });
}

}  // namespace

TEST(Gradcheck, PassesCorrectOps) {
  Tensor a = leaf({3, 4}, 1, -2, 2), b = leaf({4}, 2);
  GradcheckReport r = gradcheck(
      [](const std::vector<Tensor>& in) { return tanh(in[0] * in[1]) / (in[1] * in[1] + 1.0); }, {a, b});
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_TRUE(r.inputs[0].checked && r.inputs[0].ok && r.inputs[1].checked && r.inputs[1].ok);
  EXPECT_LT(r.inputs[0].max_abs_err, 1e-7);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_TRUE(contains(r.summary(), "gradcheck passed (2 of 2 inputs checked)")) << r.summary();
  // the struct and lambda custom forms, when right
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return Square{}(in[0]); }, {a}).ok);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return custom_mul(in[0], in[1], false); },
                        {a, leaf({3, 4}, 3)}).ok);
  // 0-d in and out, a non-contiguous input
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]); }, {leaf({}, 4)}).ok);
  Tensor t = leaf({4, 3}, 5).detach().transpose(0, 1).detach().requires_grad_();
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sum(in[0] * in[0], {1}); }, {t}).ok);
}

TEST(Gradcheck, RestoresInputValues) {
  Tensor a = leaf({2, 3}, 6);
  const std::vector<double> before = a.to_vector<double>();
  gradcheck([](const std::vector<Tensor>& in) { return log(in[0]); }, {a});
  EXPECT_EQ(a.to_vector<double>(), before);
}

TEST(Gradcheck, CatchesWrongStructBackwardAndPointsAtTheElement) {
  Tensor x = leaf({2, 3}, 7);
  Square bad;
  bad.wrong_element = 5;  // index [1, 2]
  GradcheckReport r = gradcheck([&](const std::vector<Tensor>& in) { return bad(in[0]); }, {x});
  ASSERT_FALSE(r.ok);
  const InputReport& ir = r.inputs.at(0);
  EXPECT_FALSE(ir.ok);
  EXPECT_EQ(ir.worst_input, 5);
  EXPECT_EQ(ir.worst_input_index, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ir.worst_output, 5);
  const double xv = x.to_vector<double>()[5];
  EXPECT_NEAR(ir.numerical, 2 * xv, 1e-6);
  EXPECT_NEAR(ir.analytical, 4 * xv, 1e-12);
  ASSERT_EQ(r.failures.size(), 1u);
  const std::string& f = r.failures[0];
  EXPECT_TRUE(contains(f, "input 0") && contains(f, "[1, 2]") && contains(f, "output element 5")) << f;
  EXPECT_TRUE(contains(f, fmt::format("{:.8g}", 2 * xv)) && contains(f, fmt::format("{:.8g}", 4 * xv))) << f;
  const std::string s = r.summary();
  EXPECT_TRUE(contains(s, "gradcheck FAILED") && contains(s, "input 0: FAILED")) << s;
  // The correct elements do not pollute the report: with the mistake on element 0 it points there.
  bad.wrong_element = 0;
  GradcheckReport r0 = gradcheck([&](const std::vector<Tensor>& in) { return bad(in[0]); }, {x});
  EXPECT_EQ(r0.inputs[0].worst_input_index, (std::vector<int64_t>{0, 0}));
}

TEST(Gradcheck, CatchesLambdaBackwardWrongForOneInputOnly) {
  Tensor a = leaf({2, 2}, 8), b = leaf({2, 2}, 9);
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return custom_mul(in[0], in[1], true); }, {a, b});
  ASSERT_FALSE(r.ok);
  EXPECT_TRUE(r.inputs[0].ok);
  EXPECT_FALSE(r.inputs[1].ok);
  EXPECT_NEAR(r.inputs[1].analytical / r.inputs[1].numerical, 1.5, 1e-6);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_TRUE(contains(r.failures[0], "input 1 [2, 2]")) << r.failures[0];
  EXPECT_TRUE(contains(r.summary(), "input 0: ok")) << r.summary();
  // Input 1 not requiring grad: skipped, and the rest passes.
  GradcheckReport skip =
      gradcheck([](const std::vector<Tensor>& in) { return custom_mul(in[0], in[1], true); }, {a, b.detach()});
  EXPECT_TRUE(skip.ok) << skip.summary();
  EXPECT_TRUE(skip.inputs[0].checked);
  EXPECT_FALSE(skip.inputs[1].checked);
  EXPECT_TRUE(contains(skip.summary(), "1 of 2 inputs checked") && contains(skip.summary(), "input 1: skipped"))
      << skip.summary();
}

TEST(Gradcheck, CatchesNonDeterministicBackward) {
  // Tiny noise (far below the Jacobian tolerance): only the determinism check sees it.
  auto noisy = [](const std::vector<Tensor>& in) {
    auto calls = std::make_shared<int>(0);
    return custom_op(
        "noisy", {in[0]}, [](FunctionCtx&, const std::vector<Tensor>& x) { return x[0] * 3.0; },
        [calls](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad * (3.0 + 1e-12 * ++*calls)}; });
  };
  Tensor x = leaf({3}, 10);
  GradcheckReport r = gradcheck(noisy, {x});
  EXPECT_FALSE(r.ok);
  ASSERT_FALSE(r.failures.empty());
  EXPECT_TRUE(contains(r.failures[0], "not deterministic")) << r.summary();
  GradcheckOptions off;
  off.check_determinism = false;
  EXPECT_TRUE(gradcheck(noisy, {x}, off).ok);
}

TEST(Gradcheck, NaNGradientIsAMismatchNotNonDeterminism) {
  auto nan_grad = [](const std::vector<Tensor>& in) {
    return custom_op(
        "nan_grad", {in[0]}, [](FunctionCtx&, const std::vector<Tensor>& x) { return x[0] * 2.0; },
        [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad * NAN}; });
  };
  GradcheckReport r = gradcheck(nan_grad, {leaf({2}, 19)});
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.inputs[0].ok);
  for (const std::string& f : r.failures) EXPECT_FALSE(contains(f, "deterministic")) << f;
}

TEST(Gradcheck, CatchesBackwardThatDoesNotScaleWithGrad) {
  // Right for one-hot output gradients (grad² = grad), wrong for any other.
  auto squared_grad = [](const std::vector<Tensor>& in) {
    return custom_op(
        "squared_grad", {in[0]}, [](FunctionCtx&, const std::vector<Tensor>& x) { return x[0] * 2.0; },
        [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad * grad * 2.0}; });
  };
  Tensor x = leaf({2, 2}, 11);
  GradcheckReport r = gradcheck(squared_grad, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.inputs[0].ok);  // the Jacobian alone looks right
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_TRUE(contains(r.failures[0], "does not scale")) << r.summary();
  GradcheckOptions off;
  off.check_linearity = false;
  EXPECT_TRUE(gradcheck(squared_grad, {x}, off).ok);
  // A backward returning a constant is caught as well.
  auto constant = [](const std::vector<Tensor>& in) {
    return custom_op(
        "constant_grad", {in[0]}, [](FunctionCtx&, const std::vector<Tensor>& v) { return v[0] * 2.0; },
        [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{Tensor::full(grad.shape(), 2.0, DType::f64)}; });
  };
  GradcheckReport rc = gradcheck(constant, {x});
  EXPECT_FALSE(rc.ok);
  bool scale_failure = false;
  for (const std::string& f : rc.failures) scale_failure = scale_failure || contains(f, "does not scale");
  EXPECT_TRUE(scale_failure) << rc.summary();
}

TEST(Gradcheck, Float32WarnsOrThrows) {
  Tensor x = leaf({3}, 12).detach().to(DType::f32).requires_grad_();
  GradcheckOptions loose;
  loose.eps = 1e-2;
  loose.atol = 1e-2;
  loose.rtol = 1e-2;
  GradcheckReport r = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {x}, loose);
  EXPECT_TRUE(r.ok) << r.summary();
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_TRUE(contains(r.warnings[0], "input 0 is f32")) << r.warnings[0];
  EXPECT_TRUE(contains(r.summary(), "warning: input 0 is f32"));
  GradcheckOptions strict = loose;
  strict.allow_float32 = false;
  expect_error<ValueError>([&] { gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {x}, strict); },
                           {"gradcheck", "input 0", "f32", "f64"});
  // f32 inputs that do not require grad are not a problem
  GradcheckReport mixed = gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1].to(DType::f64); },
                                    {leaf({3}, 13), Tensor::ones({3})}, strict);
  EXPECT_TRUE(mixed.ok && mixed.warnings.empty()) << mixed.summary();
}

TEST(Gradcheck, RaiseOnFailureThrowsGradcheckError) {
  GradcheckOptions opt;
  opt.raise_on_failure = true;
  Square bad;
  bad.wrong_element = 1;
  Tensor x = leaf({3}, 14);
  expect_error<GradcheckError>([&] { gradcheck([&](const std::vector<Tensor>& in) { return bad(in[0]); }, {x}, opt); },
                               {"gradcheck FAILED", "input 0", "[1]"});
  EXPECT_NO_THROW(gradcheck([](const std::vector<Tensor>& in) { return Square{}(in[0]); }, {x}, opt));
}

TEST(Gradcheck, RefusesOverlappingMemory) {
  Tensor e = leaf({3, 1}, 15).detach().expand({3, 4}).detach().requires_grad_();
  expect_error<ValueError>([&] { gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2.0; }, {e}); },
                           {"gradcheck", "input 0", "[3, 4]", "overlapping"});
  // an expanded input that does not require grad is fine
  Tensor c = Tensor::ones({1, 4}, DType::f64).expand({3, 4});
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {leaf({3, 4}, 16), c}).ok);
}

TEST(CustomFunction, NeedsInputGradAndSavedTensors) {
  Tensor a = leaf({2}, 17), b = leaf({2}, 18).detach();
  bool saw_need_a = false, saw_need_b = true;
  Tensor y = custom_op(
      "probe", {a, b},
      [](FunctionCtx& ctx, const std::vector<Tensor>& in) {
        EXPECT_FALSE(GradMode::enabled());  // forward is not recorded
        EXPECT_FALSE(in[0].requires_grad());  // and sees detached inputs
        ctx.save_for_backward({in[0], Tensor()});
        return in[0] + in[1];
      },
      [&](FunctionCtx& ctx, const Tensor& grad) {
        saw_need_a = ctx.needs_input_grad(0);
        saw_need_b = ctx.needs_input_grad(1);
        EXPECT_EQ(ctx.saved_tensors().size(), 2u);
        EXPECT_FALSE(ctx.saved(1).defined());
        expect_error<IndexError>([&] { ctx.saved(2); }, {"saved", "2"});
        return std::vector<Tensor>{grad, grad};
      });
  EXPECT_EQ(y.grad_fn_name(), "probe");
  sum(y).backward();
  EXPECT_TRUE(saw_need_a);
  EXPECT_FALSE(saw_need_b);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_FALSE(b.grad().defined());
  // Nothing requires grad: no node.
  EXPECT_EQ(Square{}(b).grad_fn(), nullptr);
  // forward must return a floating tensor
  expect_error<DTypeError>([&] {
    custom_op("int_out", {a}, [](FunctionCtx&, const std::vector<Tensor>&) { return Tensor::zeros({2}, DType::i64); },
              [](FunctionCtx&, const Tensor&) { return std::vector<Tensor>{}; });
  }, {"int_out", "floating", "i64"});
  // a forward returning its input gets a fresh output tensor, so the graph has no self-loop
  Tensor z = custom_op(
      "identity", {a}, [](FunctionCtx&, const std::vector<Tensor>& in) { return in[0]; },
      [](FunctionCtx&, const Tensor& grad) { return std::vector<Tensor>{grad * 1.0}; });
  EXPECT_FALSE(z.is_same(a));
  a.zero_grad();
  sum(z).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1}));
}
