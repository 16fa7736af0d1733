// Elementwise ops: forward, then the backward closure right under it.
// Float32 exp, tanh, sigmoid, normal_cdf and gelu (forward and backward) take
// their transcendentals from vecmath.h (SLEEF, 1.0 ulp) a block at a time;
// float64 stays std:: math.
//
// Shape legend: a, b, x are any shapes that broadcast together (NumPy rules);
// out has the broadcast shape; grad (dL/dout) has out's shape. A broadcast
// operand's gradient is brought back to its own shape by sum_to().
//
// Higher-order gradients: closures built from differentiable ops (add, sub,
// mul, div, neg, exp, log, where, masked_fill) serve both modes, with their
// saved tensors taken through dx.input()/dx.output(). The ones whose fast
// backward is a fused kernel (pow, sqrt, abs, tanh, sigmoid, relu, gelu,
// clamp) write the same formula in differentiable ops when dx.create_graph();
// a piecewise-constant factor (a sign, a mask) enters as a constant.
#include <attograd/autograd/ops/elementwise.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include <attograd/autograd/autocast.h>
#include <attograd/autograd/backend/vecmath.h>
#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/map_zip.h>
#include <attograd/autograd/ops/reduction.h>

namespace attograd {

namespace {

void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail<DTypeError>(op, "operands have dtypes {} {} and {} {}; hint: convert one with .to()",
                     dtype_name(a.dtype()), shape_str(a.shape()), dtype_name(b.dtype()),
                     shape_str(b.shape()));
}

// f restricted to exactly (A, B). zip instantiates its loops for every dtype
// b might have whenever f accepts it, and a lambda taking (T, T) or (T, bool)
// accepts any dtype by conversion: 16 copies per call site instead of 4 made
// this file take minutes to compile under the sanitizers.
template <class A, class B, class F>
auto exact(F f) {
  return [f]<class X, class Y>(X x, Y y) requires(std::is_same_v<X, A> && std::is_same_v<Y, B>) { return f(x, y); };
}

// Values of f(a, b) over the broadcast shape, for a floating dtype.
template <class F>
Tensor zip_float(std::string_view op, const Tensor& a, const Tensor& b, F f) {
  check_same_dtype(op, a, b);
  return dispatch_float(a.dtype(), op, [&]<class T>() { return zip<T>(op, a, b, exact<T, T>([&](T x, T y) { return f(x, y); })); });
}

template <class F>
Tensor map_float(std::string_view op, const Tensor& x, F f) {
  return dispatch_float(x.dtype(), op, [&]<class T>() { return map<T>(x, [&](T v) { return f(v); }); });
}

// map_float with a float32 fast path: block(y, x, n) computes y over n ≤
// kVecBlock contiguous floats with vecmath.h's functions; float64 takes f.
template <class F, class Block>
Tensor map_float_vec(std::string_view op, const Tensor& x, F f, Block block) {
  if (x.dtype() != DType::f32) return map_float(op, x, f);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::empty(x.shape(), DType::f32);
  const float* px = xc.data<float>();
  float* po = out.data<float>();
  parallel_for(out.numel(), kElementwiseGrain, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; i += kVecBlock) block(po + i, px + i, std::min(kVecBlock, last - i));
  });
  return out;
}

// zip_float with the same fast path for float32 operands of one shape:
// block(y, a, b, n); broadcasting and float64 take f.
template <class F, class Block>
Tensor zip_float_vec(std::string_view op, const Tensor& a, const Tensor& b, F f, Block block) {
  if (a.dtype() != DType::f32 || b.dtype() != DType::f32 || a.shape() != b.shape()) return zip_float(op, a, b, f);
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  Tensor out = Tensor::empty(a.shape(), DType::f32);
  const float *pa = ac.data<float>(), *pb = bc.data<float>();
  float* po = out.data<float>();
  parallel_for(out.numel(), kElementwiseGrain, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; i += kVecBlock) block(po + i, pa + i, pb + i, std::min(kVecBlock, last - i));
  });
  return out;
}

Tensor scalar_like(double v, const Tensor& t) { return Tensor::scalar(v, t.dtype()); }

}  // namespace

// sum_to: x [broadcast of shape] -> out [shape]
Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const size_t lead = x.dim() - shape.size();
  if (x.shape().size() < shape.size())
    fail<ShapeError>("sum_to", "cannot sum shape {} to the larger shape {}", shape_str(x.shape()), shape_str(shape));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead) dims.push_back(static_cast<int64_t>(i));
    else if (shape[i - lead] == 1 && x.shape()[i] != 1) dims.push_back(static_cast<int64_t>(i));
    else if (shape[i - lead] != x.shape()[i])
      fail<ShapeError>("sum_to", "shape {} is not a broadcast of {}", shape_str(x.shape()), shape_str(shape));
  }
  return sum(x, dims, /*keepdim=*/true).reshape(shape);
}

// ---- binary arithmetic ------------------------------------------------------

// add: out = a + b
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = zip_float("add", a, b, [](auto x, auto y) { return x + y; });
  return record("add", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& grad, Grads& dx) {
    // out = a + b  =>  da = grad,  db = grad
    if (dx.needs(0)) dx[0] += sum_to(grad, sa);
    if (dx.needs(1)) dx[1] += sum_to(grad, sb);
  });
}

// sub: out = a - b
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = zip_float("sub", a, b, [](auto x, auto y) { return x - y; });
  return record("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& grad, Grads& dx) {
    // out = a - b  =>  da = grad,  db = -grad
    if (dx.needs(0)) dx[0] += sum_to(grad, sa);
    if (dx.needs(1)) dx[1] += sum_to(neg(grad), sb);
  });
}

// mul: out = a * b
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = zip_float("mul", a, b, [](auto x, auto y) { return x * y; });
  if (!any_requires_grad({a, b})) return out;
  // Save each operand only if the *other* one needs a gradient.
  return record("mul", out, {a, b},
                {{"a", b.requires_grad() ? a.detach() : Tensor()}, {"b", a.requires_grad() ? b.detach() : Tensor()}},
                [shape_a = a.shape(), shape_b = b.shape()](const Tensor& grad, Grads& dx, const Tensor& sa,
                                                           const Tensor& sb) {
    // out = a * b  =>  da = grad * b,  db = grad * a
    if (dx.needs(0)) dx[0] += sum_to(mul(grad, dx.input(1, sb)), shape_a);
    if (dx.needs(1)) dx[1] += sum_to(mul(grad, dx.input(0, sa)), shape_b);
  });
}

// div: out = a / b
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = zip_float("div", a, b, [](auto x, auto y) { return x / y; });
  if (!any_requires_grad({a, b})) return out;
  return record("div", out, {a, b}, {{"b", b.detach()}, {"out", out.detach()}},
                [sa = a.shape(), sb = b.shape()](const Tensor& grad, Grads& dx, const Tensor& b_, const Tensor& y) {
    // out = a / b  =>  da = grad / b,  db = -grad * a / b^2 = -grad * out / b
    const Tensor bb = dx.input(1, b_);
    if (dx.needs(0)) dx[0] += sum_to(div(grad, bb), sa);
    if (dx.needs(1)) dx[1] += sum_to(neg(div(mul(grad, dx.output(y)), bb)), sb);
  });
}

// pow: out = a ^ b (elementwise, both tensors)
Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = zip_float("pow", a, b, [](auto x, auto y) { return std::pow(x, y); });
  if (!any_requires_grad({a, b})) return out;
  return record("pow", out, {a, b}, {{"a", a.detach()}, {"b", b.detach()}, {"out", out.detach()}},
                [](const Tensor& grad, Grads& dx, const Tensor& a_, const Tensor& b_, const Tensor& y) {
    // out = a^b  =>  da = grad * b * a^(b-1),  db = grad * out * log(a)
    if (dx.create_graph()) {
      const Tensor ag = dx.input(0, a_), bg = dx.input(1, b_), zero = scalar_like(0, a_);
      if (dx.needs(0)) dx[0] += sum_to(mul(grad, where(eq(b_, zero), zero, bg * pow(ag, bg - 1.0))), a_.shape());
      if (dx.needs(1)) dx[1] += sum_to(mul(grad, where(eq(a_, zero), zero, dx.output(y) * log(ag))), b_.shape());
      return;
    }
    if (dx.needs(0)) {
      Tensor da = zip_float("pow", a_, b_, [](auto x, auto e) { return e == 0 ? decltype(x)(0) : e * std::pow(x, e - 1); });
      dx[0] += sum_to(mul(grad, da), a_.shape());
    }
    if (dx.needs(1)) {
      // d/db a^b = a^b log a; taken as 0 where a == 0 (PyTorch's convention: b > 0 there)
      Tensor db = zip_float("pow", y, a_, [](auto p, auto x) { return x == 0 ? decltype(x)(0) : p * std::log(x); });
      dx[1] += sum_to(mul(grad, db), b_.shape());
    }
  });
}

// pow: out = x ^ p (scalar exponent)
Tensor pow(const Tensor& x, double p) {
  Tensor out = map_float("pow", x, [p](auto v) { return std::pow(v, static_cast<decltype(v)>(p)); });
  return record("pow", out, {x}, {{"x", x.detach()}}, [p](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = x^p  =>  dx = grad * p * x^(p-1)
    if (p == 0) { dx[0] += Tensor::zeros(grad.shape(), grad.dtype()); return; }
    if (dx.create_graph()) { dx[0] += mul(grad, pow(dx.input(0, x_), p - 1) * p); return; }
    dx[0] += mul(grad, map_float("pow", x_, [p](auto v) { using T = decltype(v); return static_cast<T>(p) * std::pow(v, static_cast<T>(p - 1)); }));
  });
}

// ---- unary ---------------------------------------------------------------------

// neg: out = -x
Tensor neg(const Tensor& x) {
  Tensor out = map_float("neg", x, [](auto v) { return -v; });
  return record("neg", out, {x}, [](const Tensor& grad, Grads& dx) {
    // out = -x  =>  dx = -grad
    dx[0] += neg(grad);
  });
}

// exp: out = e^x (saves out)
Tensor exp(const Tensor& x) {
  Tensor out = map_float_vec("exp", x, [](auto v) { return std::exp(v); }, vec_exp);
  return record("exp", out, {x}, {{"out", out.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = e^x  =>  dx = grad * out
    dx[0] += mul(grad, dx.output(y));
  });
}

// log: out = ln x
Tensor log(const Tensor& x) {
  Tensor out = map_float("log", x, [](auto v) { return std::log(v); });
  return record("log", out, {x}, {{"x", x.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = ln x  =>  dx = grad / x
    dx[0] += div(grad, dx.input(0, x_));
  });
}

// sqrt: out = √x (saves out)
Tensor sqrt(const Tensor& x) {
  Tensor out = map_float("sqrt", x, [](auto v) { return std::sqrt(v); });
  return record("sqrt", out, {x}, {{"out", out.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = √x  =>  dx = grad / (2 out)
    if (dx.create_graph()) { dx[0] += div(grad, dx.output(y) * 2.0); return; }
    dx[0] += zip_float("sqrt", grad, y, [](auto g, auto r) { return g / (2 * r); });
  });
}

// abs: out = |x|
Tensor abs(const Tensor& x) {
  Tensor out = map_float("abs", x, [](auto v) { return std::abs(v); });
  return record("abs", out, {x}, {{"x", x.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = |x|  =>  dx = grad * sign(x)   (sign(0) = 0, as PyTorch)
    if (dx.create_graph()) {
      dx[0] += mul(grad, map_float("abs", x_, [](auto v) { return decltype(v)((v > 0) - (v < 0)); }));
      return;
    }
    dx[0] += zip_float("abs", grad, x_, [](auto g, auto v) { return v > 0 ? g : (v < 0 ? -g : decltype(g)(0)); });
  });
}

// tanh: out = tanh x (saves out)
Tensor tanh(const Tensor& x) {
  Tensor out = map_float_vec("tanh", x, [](auto v) { return std::tanh(v); }, vec_tanh);
  return record("tanh", out, {x}, {{"out", out.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = tanh x  =>  dx = grad * (1 - out^2)
    if (dx.create_graph()) { const Tensor t = dx.output(y); dx[0] += mul(grad, 1.0 - t * t); return; }
    dx[0] += zip_float("tanh", grad, y, [](auto g, auto t) { return g * (1 - t * t); });
  });
}

// sigmoid: out = 1 / (1 + e^-x) (saves out)
Tensor sigmoid(const Tensor& x) {
  const auto scalar = [](auto v) {
    using T = decltype(v);
    return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
  };
  Tensor out = map_float_vec("sigmoid", x, scalar, [](float* y, const float* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = -std::abs(v[i]);  // e^-|v|: e^-v for v ≥ 0, e^v below
    vec_exp(y, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = v[i] >= 0 ? 1.0f / (1.0f + y[i]) : y[i] / (1.0f + y[i]);
  });
  return record("sigmoid", out, {x}, {{"out", out.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = σ(x)  =>  dx = grad * out * (1 - out)
    if (dx.create_graph()) { const Tensor s = dx.output(y); dx[0] += mul(grad, s * (1.0 - s)); return; }
    dx[0] += zip_float("sigmoid", grad, y, [](auto g, auto s) { return g * s * (1 - s); });
  });
}

// relu: out = max(x, 0) (saves out)
Tensor relu(const Tensor& x) {
  Tensor out = map_float("relu", x, [](auto v) { return v > 0 ? v : decltype(v)(0); });
  return record("relu", out, {x}, {{"out", out.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& y) {
    // out = max(x, 0)  =>  dx = grad where out > 0, else 0
    if (dx.create_graph()) { dx[0] += mul(grad, map_float("relu", y, [](auto r) { return decltype(r)(r > 0); })); return; }
    dx[0] += zip_float("relu", grad, y, [](auto g, auto r) { return r > 0 ? g : decltype(g)(0); });
  });
}

// gelu: out = x Φ(x), Φ the standard normal CDF
//   exact:  Φ(x) = ½ (1 + erf(x/√2))
//   tanh:   Φ(x) ≈ ½ (1 + tanh(√(2/π) (x + 0.044715 x³)))
namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440, kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794, kC = 0.044715;

// φ(x) = e^(-x²/2) / √(2π), in differentiable ops.
Tensor normal_pdf(const Tensor& x) { return exp(x * x * -0.5) * kInvSqrt2Pi; }

// normal_cdf: out = Φ(x) = ½ (1 + erf(x/√2))
Tensor normal_cdf(const Tensor& x) {
  const auto scalar = [](auto v) {
    using T = decltype(v);
    return T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2)));
  };
  Tensor out = map_float_vec("normal_cdf", x, scalar, [](float* y, const float* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = v[i] * float(kInvSqrt2);
    vec_erf(y, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * (1.0f + y[i]);
  });
  return record("normal_cdf", out, {x}, {{"x", x.detach()}}, [](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = Φ(x)  =>  dx = grad * φ(x)
    dx[0] += mul(grad, normal_pdf(dx.input(0, x_)));
  });
}

// d/dx gelu(x) in differentiable ops (gelu's backward while a graph is being created).
Tensor gelu_slope(const Tensor& x, bool exact) {
  if (exact) return normal_cdf(x) + x * normal_pdf(x);
  const Tensor t = tanh((x + x * x * x * kC) * kSqrt2OverPi);
  return (1.0 + t) * 0.5 + x * 0.5 * (1.0 - t * t) * ((1.0 + x * x * (3 * kC)) * kSqrt2OverPi);
}
}  // namespace

Tensor gelu(const Tensor& x, GeluApprox approx) {
  const bool exact = approx == GeluApprox::none;
  const auto scalar = [exact](auto v) {
    using T = decltype(v);
    if (exact) return T(0.5) * v * (T(1) + std::erf(v * T(kInvSqrt2)));
    return T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kC) * v * v * v)));
  };
  Tensor out = map_float_vec("gelu", x, scalar, [exact](float* y, const float* v, int64_t n) {
    if (exact) {
      for (int64_t i = 0; i < n; ++i) y[i] = v[i] * float(kInvSqrt2);
      vec_erf(y, y, n);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = float(kSqrt2OverPi) * (v[i] + float(kC) * v[i] * v[i] * v[i]);
      vec_tanh(y, y, n);
    }
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * v[i] * (1.0f + y[i]);
  });
  // Under bf16 autocast backward keeps x rounded to bf16, half its bytes (in a transformer's MLP x is
  // [B·T, F], the largest activation): the slope at the rounded x differs by about 2^-9 relative, the
  // rounding every product's operand gets (autocast.h).
  const bool low = autocast_to_bf16(x.dtype()) && x.requires_grad() && GradMode::enabled();
  return record("gelu", out, {x}, {{"x", low ? bf16_rounded(x) : x.detach()}},
                [exact, low](const Tensor& grad, Grads& dx, const Tensor& kept) {
    // exact: d/dx [x Φ(x)] = Φ(x) + x φ(x),   φ(x) = e^(-x²/2) / √(2π)
    // tanh:  with u = √(2/π)(x + 0.044715x³), t = tanh u:
    //        d/dx = ½(1 + t) + ½ x (1 - t²) √(2/π) (1 + 3·0.044715 x²)
    const Tensor x_ = low ? kept.to(DType::f32) : kept;
    if (dx.create_graph()) {
      // The slope at the rounded x, as below; a leaf input comes back exact, so it is moved onto the
      // rounded values by a constant (its gradient stays the input's).
      Tensor xin = dx.input(0, x_);
      if (low) xin = add(xin, sub(x_, xin.detach()));
      dx[0] += mul(grad, gelu_slope(xin, exact));
      return;
    }
    const auto scalar_slope = [exact](auto g, auto v) {
      using T = decltype(v);
      if (exact) {
        const T cdf = T(0.5) * (T(1) + std::erf(v * T(kInvSqrt2)));
        const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * v * v);
        return g * (cdf + v * pdf);
      }
      const T t = std::tanh(T(kSqrt2OverPi) * (v + T(kC) * v * v * v));
      return g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kC) * v * v));
    };
    dx[0] += zip_float_vec("gelu", grad, x_, scalar_slope, [exact](float* d, const float* g, const float* v, int64_t n) {
      if (exact) {  // d holds erf(v/√2), e the exponential of φ(v)
        float e[kVecBlock];
        for (int64_t i = 0; i < n; ++i) d[i] = v[i] * float(kInvSqrt2), e[i] = -0.5f * v[i] * v[i];
        vec_erf(d, d, n);
        vec_exp(e, e, n);
        for (int64_t i = 0; i < n; ++i) d[i] = g[i] * (0.5f * (1.0f + d[i]) + v[i] * (float(kInvSqrt2Pi) * e[i]));
        return;
      }
      for (int64_t i = 0; i < n; ++i) d[i] = float(kSqrt2OverPi) * (v[i] + float(kC) * v[i] * v[i] * v[i]);
      vec_tanh(d, d, n);  // d holds t
      for (int64_t i = 0; i < n; ++i)
        d[i] = g[i] * (0.5f * (1.0f + d[i]) +
                       0.5f * v[i] * (1.0f - d[i] * d[i]) * float(kSqrt2OverPi) * (1.0f + float(3 * kC) * v[i] * v[i]));
    });
  });
}

// clamp: out = min(max(x, lo), hi)
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  if (lo && hi && *lo > *hi) fail<ValueError>("clamp", "lo ({}) must not exceed hi ({})", *lo, *hi);
  const double l = lo.value_or(-INFINITY), h = hi.value_or(INFINITY);
  Tensor out = map_float("clamp", x, [l, h](auto v) {
    using T = decltype(v);
    return v < T(l) ? T(l) : (v > T(h) ? T(h) : v);
  });
  return record("clamp", out, {x}, {{"x", x.detach()}}, [l, h](const Tensor& grad, Grads& dx, const Tensor& x_) {
    // out = clamp(x, lo, hi)  =>  dx = grad where lo <= x <= hi, else 0
    if (dx.create_graph()) {
      dx[0] += mul(grad, map_float("clamp", x_, [l, h](auto v) {
        using T = decltype(v);
        return T(v >= T(l) && v <= T(h));
      }));
      return;
    }
    dx[0] += zip_float("clamp", grad, x_, [l, h](auto g, auto v) {
      using T = decltype(v);
      return (v >= T(l) && v <= T(h)) ? g : T(0);
    });
  });
}

namespace {
void check_mask(std::string_view op, const Tensor& m) {
  if (m.dtype() != DType::b8)
    fail<DTypeError>(op, "mask must be b8 (bool), got {} {}; hint: build it with eq/gt/lt or "
                     "Tensor::from_vector(std::vector<bool>)", dtype_name(m.dtype()), shape_str(m.shape()));
}
}  // namespace

// where: out = cond ? a : b     cond (b8), a, b broadcast together
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_mask("where", cond);
  check_same_dtype("where", a, b);
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor c, out;
  {
    NoGradGuard no_grad;  // the expands below are forward plumbing, not graph
    c = cond.expand(shape);
    const Tensor bv = b.expand(shape).contiguous();
    out = dispatch_float(a.dtype(), "where", [&]<class T>() {
      Tensor r = zip<T>("where", a, c, exact<T, bool>([](T v, bool m) { return m ? v : T(0); }));
      T* po = r.data<T>();
      const T* pb = bv.data<T>();
      const Tensor cc = c.contiguous();
      const bool* pc = cc.data<bool>();
      for (int64_t i = 0, n = r.numel(); i < n; ++i) if (!pc[i]) po[i] = pb[i];
      return r;
    });
  }
  return record("where", out, {a, b}, {{"cond", c}},
                [sa = a.shape(), sb = b.shape()](const Tensor& grad, Grads& dx, const Tensor& cond_) {
    // out = cond ? a : b  =>  da = grad where cond,  db = grad where !cond
    if (dx.needs(0)) dx[0] += sum_to(masked_fill(grad, logical_not(cond_), 0.0), sa);
    if (dx.needs(1)) dx[1] += sum_to(masked_fill(grad, cond_, 0.0), sb);
  });
}

// masked_fill: out = mask ? value : x     mask (b8) broadcasts to x's shape; out: x's shape
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_mask("masked_fill", mask);
  if (broadcast_shapes(x.shape(), mask.shape(), "masked_fill") != x.shape())
    fail<ShapeError>("masked_fill", "mask {} must broadcast to the input's shape {}", shape_str(mask.shape()),
                     shape_str(x.shape()));
  Tensor out = dispatch_float(x.dtype(), "masked_fill", [&]<class T>() {
    const T v = static_cast<T>(value);
    return zip<T>("masked_fill", x, mask, exact<T, bool>([v](T a, bool m) { return m ? v : a; }));
  });
  return record("masked_fill", out, {x}, {{"mask", mask}}, [](const Tensor& grad, Grads& dx, const Tensor& m) {
    // out = mask ? value : x  =>  dx = grad where !mask, else 0 (a constant has no gradient)
    dx[0] += masked_fill(grad, m, 0.0);
  });
}

// ---- comparisons (no gradient) ---------------------------------------------------

namespace {
// f(a, b) as b8 over the broadcast shape, for f32, f64, i64 and b8 operands;
// bf16 is storage only (dtype.h), so comparing it is a DTypeError too.
template <class F>
Tensor compare(std::string_view op, const Tensor& a, const Tensor& b, F f) {
  check_same_dtype(op, a, b);
  return dispatch_all(a.dtype(), [&]<class T>() -> Tensor {
    if constexpr (std::is_same_v<T, BFloat16>) fail_bf16_math(op);
    else return zip<T>(op, a, b, exact<T, T>(f), DType::b8);
  });
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", a, b, [](auto x, auto y) { return x == y; }); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", a, b, [](auto x, auto y) { return x > y; }); }
Tensor lt(const Tensor& a, const Tensor& b) { return gt(b, a); }
Tensor logical_not(const Tensor& m) {
  check_mask("logical_not", m);
  return map<bool>(m, [](bool v) { return !v; }, DType::b8);
}

// ---- operators -------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

}  // namespace attograd
