// gradcheck in three parts: the analytic Jacobian (row by row, one backward
// per output element), the numeric one (column by column, central
// differences, one input at a time) and their comparison (the worst element
// of each input).
#include <attograd/autograd/gradcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/tensor_impl.h>
#include <attograd/autograd/ops/elementwise.h>
#include <attograd/autograd/ops/reduction.h>

namespace attograd {

namespace {

// Offsets (in elements) of every element of t, in logical order.
std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offs;
  offs.reserve(t.numel());
  for_each_offset(t.shape(), t.strides(), t.offset(), [&](int64_t o) { offs.push_back(o); });
  return offs;
}

double get(const Tensor& t, int64_t off) {
  return dispatch_float(t.dtype(), "gradcheck", [&]<class T>() {
    return static_cast<double>(storage_base<const T>(t)[off]);
  });
}
void set(const Tensor& t, int64_t off, double v) {
  dispatch_float(t.dtype(), "gradcheck", [&]<class T>() { storage_base<T>(t)[off] = static_cast<T>(v); });
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

// Bitwise equality, so that NaN gradients that repeat count as the same.
bool same_bits(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0))  // empty: data() may be null
      return false;
  return true;
}

std::vector<double> as_doubles(const Tensor& t) {
  if (!t.defined()) return {};
  return t.to_vector<double>();
}

bool is_checked(const Tensor& x) { return x.defined() && x.requires_grad(); }

// Per input, a flat float64 vector (empty for an input that is not checked).
using PerInput = std::vector<std::vector<double>>;

// The leaves to differentiate: a leaf input is used as it is (so module
// parameters, which the function reaches through the module, can be checked;
// their .grad is cleared); any other input is replaced by a detached alias
// (same storage and strides, no history).
std::vector<Tensor> leaves_of(const std::vector<Tensor>& inputs, const GradcheckOptions& opt, GradcheckReport& report) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    Tensor x = !in.defined() || (in.is_leaf() && in.requires_grad()) ? in : in.detach();
    if (in.defined() && in.requires_grad()) {
      if (in.dtype() != DType::f64) {
        if (!opt.allow_float32)
          fail<ValueError>("gradcheck", "input {} is {}, expected f64; hint: call .to(DType::f64) on inputs and "
                           "module parameters", i, dtype_name(in.dtype()));
        report.warnings.push_back(fmt::format("input {} is {}, not f64: finite differences will be imprecise", i,
                                              dtype_name(in.dtype())));
      }
      std::vector<int64_t> offs = element_offsets(x);
      std::sort(offs.begin(), offs.end());
      if (std::adjacent_find(offs.begin(), offs.end()) != offs.end())
        fail<ValueError>("gradcheck", "input {} {} has overlapping memory (strides {}), so one perturbation would "
                         "move several elements; hint: pass .contiguous()", i, shape_str(x.shape()), shape_str(x.strides()));
      x.requires_grad_(true);
    }
    xs.push_back(x);
  }
  return xs;
}

// The gradients of every checked input for the output gradient `g` (flat, in
// out's shape), by one backward through out's kept graph.
PerInput input_grads(const Tensor& out, std::vector<Tensor>& xs, const std::vector<double>& g) {
  for (Tensor& x : xs)
    if (is_checked(x)) x.zero_grad();
  PerInput res(xs.size());
  if (out.requires_grad()) out.backward(Tensor::from_vector(g, out.shape(), out.dtype()), /*retain_graph=*/true);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!is_checked(xs[i])) continue;
    res[i] = xs[i].grad().defined() ? as_doubles(xs[i].grad()) : std::vector<double>(xs[i].numel(), 0.0);
  }
  return res;
}

struct AnalyticJacobian {
  PerInput jac;  // jac[i][k * N_i + j] = d out[k] / d xs[i][j]
  bool deterministic = true;
};

// Row k of every input's Jacobian is the input gradient for grad = one-hot(k).
// With `check_determinism`, each row is computed twice and must repeat bit for bit.
AnalyticJacobian analytic_jacobian(const Tensor& out, std::vector<Tensor>& xs, bool check_determinism) {
  AnalyticJacobian a;
  a.jac.resize(xs.size());
  std::vector<double> onehot(out.numel(), 0.0);
  for (int64_t k = 0; k < out.numel(); ++k) {
    onehot[k] = 1.0;
    const PerInput g = input_grads(out, xs, onehot);
    if (check_determinism && !same_bits(input_grads(out, xs, onehot), g)) a.deterministic = false;
    onehot[k] = 0.0;
    for (size_t i = 0; i < xs.size(); ++i) a.jac[i].insert(a.jac[i].end(), g[i].begin(), g[i].end());
  }
  return a;
}

// Backward is linear in the output gradient: grad · 2 gives twice the input
// gradients. Adds one failure per input that breaks it.
void check_linearity(const Tensor& out, std::vector<Tensor>& xs, const GradcheckOptions& opt,
                     GradcheckReport& report) {
  const int64_t K = out.numel();
  if (K == 0) return;
  std::vector<double> v(K), v2(K);
  for (int64_t k = 0; k < K; ++k) {
    v[k] = 0.5 + 0.25 * static_cast<double>(k % 7);
    v2[k] = 2.0 * v[k];
  }
  const PerInput g1 = input_grads(out, xs, v), g2 = input_grads(out, xs, v2);
  for (size_t i = 0; i < xs.size(); ++i)
    for (size_t j = 0; j < g1[i].size(); ++j)
      if (std::abs(g2[i][j] - 2.0 * g1[i][j]) > opt.atol + opt.rtol * std::abs(2.0 * g1[i][j])) {
        report.ok = false;
        report.failures.push_back(fmt::format("input {}: backward does not scale with the output gradient "
                                              "(element {}: grad·2 gives {}, expected {})", i, j, g2[i][j], 2.0 * g1[i][j]));
        break;
      }
}

// fn's output in float64, evaluated without recording a graph.
std::vector<double> evaluate(const GradcheckFn& fn, const std::vector<Tensor>& xs) {
  NoGradGuard no_grad;
  const Tensor out = fn(xs);
  if (!out.defined() || !is_floating(out.dtype()))
    fail<ValueError>("gradcheck", "the function must return a defined floating tensor");
  return as_doubles(out);
}

// The Jacobian of fn's K outputs with respect to input xs[i] alone, by central
// differences in float64, one element at a time:
//   num[k * N + j] = (f(x + eps e_j)[k] - f(x - eps e_j)[k]) / (2 eps).
// Each element is written back to its original value afterwards.
std::vector<double> numeric_jacobian(const GradcheckFn& fn, const std::vector<Tensor>& xs, size_t i, int64_t K,
                                     double eps) {
  const Tensor& x = xs[i];
  const std::vector<int64_t> offs = element_offsets(x);
  const int64_t N = x.numel();
  std::vector<double> num(static_cast<size_t>(K * N));
  for (int64_t j = 0; j < N; ++j) {
    const double orig = get(x, offs[j]);
    set(x, offs[j], orig + eps);
    const std::vector<double> plus = evaluate(fn, xs);
    set(x, offs[j], orig - eps);
    const std::vector<double> minus = evaluate(fn, xs);
    set(x, offs[j], orig);
    for (int64_t k = 0; k < K; ++k) num[k * N + j] = (plus[k] - minus[k]) / (2 * eps);
  }
  return num;
}

// Compares input i's two Jacobians element by element. An element passes when
// |analytic - numeric| <= atol + rtol |numeric| (and neither is NaN); the
// report keeps the worst element, the one closest to (or furthest past) its
// tolerance; on a tie, the first by input element, then output element.
InputReport compare(size_t i, const Tensor& x, const std::vector<double>& ana, const std::vector<double>& num,
                    int64_t K, const GradcheckOptions& opt) {
  InputReport r;
  r.input = i;
  r.checked = true;
  const int64_t N = x.numel();
  double worst_excess = -1;
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k) {
      const double an = ana[k * N + j], nu = num[k * N + j];
      const double abs_err = std::abs(an - nu);
      r.max_abs_err = std::max(r.max_abs_err, abs_err);
      if (abs_err > opt.atol) r.max_rel_err = std::max(r.max_rel_err, abs_err / std::max(std::abs(nu), 1e-300));
      const double excess = abs_err / (opt.atol + opt.rtol * std::abs(nu));
      if (excess > worst_excess || r.worst_output < 0) {
        worst_excess = excess;
        r.worst_output = k;
        r.worst_input = j;
        r.numerical = nu;
        r.analytical = an;
      }
      if (excess > 1 || std::isnan(an) || std::isnan(nu)) r.ok = false;
    }
  if (r.worst_input >= 0) r.worst_input_index = unravel(r.worst_input, x.shape());
  return r;
}

std::string mismatch_message(const InputReport& r, const Tensor& x, const GradcheckOptions& opt) {
  const double abs_err = std::abs(r.analytical - r.numerical);
  return fmt::format(
      "input {} {}: Jacobian mismatch at input element {} (index {}) for output element {}: numerical {:.8g}, "
      "analytical {:.8g} (abs err {:.3g}, rel err {:.3g}; atol {}, rtol {})", r.input, shape_str(x.shape()),
      r.worst_input, shape_str(r.worst_input_index), r.worst_output, r.numerical, r.analytical, abs_err,
      abs_err / std::max(std::abs(r.numerical), 1e-300), opt.atol, opt.rtol);
}

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  GradcheckReport report;
  std::vector<Tensor> xs = leaves_of(inputs, opt, report);
  const Tensor out = fn(xs);  // forward once with the graph kept, for every backward
  const AnalyticJacobian analytic = analytic_jacobian(out, xs, opt.check_determinism);
  if (!analytic.deterministic) {
    report.ok = false;
    report.failures.push_back("backward is not deterministic: two runs with the same output gradient differ");
  }
  if (opt.check_linearity) check_linearity(out, xs, opt, report);
  for (size_t i = 0; i < xs.size(); ++i) {
    InputReport r;
    r.input = i;
    if (is_checked(xs[i])) {
      r = compare(i, xs[i], analytic.jac[i], numeric_jacobian(fn, xs, i, out.numel(), opt.eps), out.numel(), opt);
      if (!r.ok) {
        report.ok = false;
        report.failures.push_back(mismatch_message(r, xs[i], opt));
      }
    }
    report.inputs.push_back(r);
  }
  for (Tensor& x : xs)
    if (is_checked(x)) x.zero_grad();

  if (!report.ok && opt.raise_on_failure) throw GradcheckError("gradcheck: " + report.summary());
  return report;
}

namespace {
// Many ops' backward takes another path while a graph is being created; its
// gradient must equal the plain backward's (gradgradcheck's h uses the former,
// so a wrong value there would otherwise go unseen). Adds one failure per
// input where they differ.
void check_create_graph_agrees(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& u,
                               const GradcheckOptions& opt, GradcheckReport& report) {
  GradModeGuard on(true);
  std::vector<Tensor> xs, wrt;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    xs.push_back(!is_checked(in) || in.is_leaf() ? in : in.detach().requires_grad_());
    if (is_checked(in)) wrt.push_back(xs.back()), which.push_back(i);
  }
  if (wrt.empty()) return;
  auto grads = [&](bool create_graph) {
    const Tensor out = fn(xs);
    GradOptions go;
    go.create_graph = create_graph;
    go.allow_unused = true;
    return out.requires_grad() ? grad({out}, wrt, {u}, go) : std::vector<Tensor>(wrt.size());
  };
  const std::vector<Tensor> plain = grads(false), created = grads(true);
  for (size_t j = 0; j < wrt.size(); ++j) {
    const std::vector<double> p = as_doubles(plain[j]), c = as_doubles(created[j]);
    for (size_t e = 0; e < std::max(p.size(), c.size()); ++e) {
      const double pv = e < p.size() ? p[e] : 0.0, cv = e < c.size() ? c[e] : 0.0;
      if (std::abs(pv - cv) > opt.atol + opt.rtol * std::abs(pv) || std::isnan(pv) != std::isnan(cv)) {
        report.ok = false;
        report.failures.push_back(fmt::format("input {}: the create_graph backward gives {:.8g} at element {}, the "
                                              "plain backward {:.8g}", which[j], cv, e, pv));
        break;
      }
    }
  }
}
}  // namespace

GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt,
                              uint64_t seed) {
  Generator gen(seed);
  Tensor u;  // the output gradient [out's shape]
  {
    NoGradGuard no_grad;
    const Tensor out = fn(inputs);
    if (!out.defined() || !is_floating(out.dtype()))
      fail<ValueError>("gradgradcheck", "the function must return a defined floating tensor");
    u = Tensor::randn(out.shape(), gen, out.dtype());
  }
  std::vector<Tensor> v(inputs.size());  // one direction per checked input [its shape]
  for (size_t i = 0; i < inputs.size(); ++i)
    if (is_checked(inputs[i])) v[i] = Tensor::randn(inputs[i].shape(), gen, inputs[i].dtype());

  // h(x) = Σ_i <grad(f(x), x_i, u), v_i>, recorded (gradcheck evaluates its
  // function without grad mode; h needs it for the inner gradient).
  const GradcheckFn h = [&](const std::vector<Tensor>& xs) {
    GradModeGuard on(true);
    const Tensor out = fn(xs);
    std::vector<Tensor> wrt, dirs;
    for (size_t i = 0; i < xs.size(); ++i)
      if (is_checked(xs[i])) wrt.push_back(xs[i]), dirs.push_back(v[i]);
    Tensor total = Tensor::zeros({}, u.dtype());
    if (wrt.empty() || !out.requires_grad()) return total;
    GradOptions go;
    go.create_graph = true;
    go.allow_unused = true;
    const std::vector<Tensor> g = grad({out}, wrt, {u}, go);
    for (size_t j = 0; j < g.size(); ++j)
      if (g[j].defined()) total = total + sum(g[j] * dirs[j]).to(u.dtype());
    return total;
  };
  GradcheckOptions inner = opt;
  inner.raise_on_failure = false;
  GradcheckReport report = gradcheck(h, inputs, inner);
  report.check = "gradgradcheck";
  check_create_graph_agrees(fn, inputs, u, opt, report);
  if (!report.ok && opt.raise_on_failure) throw GradcheckError("gradgradcheck: " + report.summary());
  return report;
}

std::string GradcheckReport::summary() const {
  size_t checked = 0;
  for (const auto& r : inputs) checked += r.checked;
  std::string s = fmt::format("{} {} ({} of {} inputs checked)", check, ok ? "passed" : "FAILED", checked, inputs.size());
  for (const auto& r : inputs) {
    if (!r.checked) {
      s += fmt::format("\n  input {}: skipped (does not require grad)", r.input);
      continue;
    }
    s += fmt::format("\n  input {}: {}  max abs err {:.3g}, max rel err {:.3g}; worst at input {} output {}: "
                     "numerical {:.8g}, analytical {:.8g}", r.input, r.ok ? "ok    " : "FAILED", r.max_abs_err,
                     r.max_rel_err, shape_str(r.worst_input_index), r.worst_output, r.numerical, r.analytical);
  }
  for (const auto& f : failures) s += "\n  failure: " + f;
  for (const auto& w : warnings) s += "\n  warning: " + w;
  return s;
}

}  // namespace attograd
