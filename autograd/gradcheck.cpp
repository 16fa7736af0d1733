// gradcheck: the analytic Jacobian (row by row, one backward per output
// element) against the numeric one (column by column, central differences).
#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/node.h"
#include "autograd/tensor_impl.h"

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
    return static_cast<double>(static_cast<const T*>(t.impl()->storage->data)[off]);
  });
}
void set(const Tensor& t, int64_t off, double v) {
  dispatch_float(t.dtype(), "gradcheck", [&]<class T>() { static_cast<T*>(t.impl()->storage->data)[off] = static_cast<T>(v); });
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

}  // namespace

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  GradcheckReport report;
  // The leaves to differentiate: a leaf input is used as it is (so module
  // parameters, which the function reaches through the module, can be checked;
  // their .grad is cleared); any other input is replaced by a detached alias
  // (same storage and strides, no history).
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

  auto eval = [&]() {
    NoGradGuard no_grad;
    Tensor out = fn(xs);
    if (!out.defined() || !is_floating(out.dtype()))
      fail<ValueError>("gradcheck", "the function must return a defined floating tensor");
    return as_doubles(out);
  };

  // Forward once with the graph kept, for every backward below.
  Tensor out = fn(xs);
  const int64_t K = out.numel();
  const Shape out_shape = out.shape();
  const DType out_dtype = out.dtype();

  // Gradients of every input for output gradient `g` (flat, out's shape).
  auto grads_for = [&](const std::vector<double>& g) {
    for (Tensor& x : xs)
      if (x.defined() && x.requires_grad()) x.zero_grad();
    std::vector<std::vector<double>> res(xs.size());
    if (out.requires_grad()) out.backward(Tensor::from_vector(g, out_shape, out_dtype), /*retain_graph=*/true);
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].defined() || !xs[i].requires_grad()) continue;
      res[i] = xs[i].grad().defined() ? as_doubles(xs[i].grad()) : std::vector<double>(xs[i].numel(), 0.0);
    }
    return res;
  };

  // Analytic Jacobian rows: ana[i][k * N_i + j].
  std::vector<std::vector<double>> ana(xs.size());
  std::vector<double> onehot(K, 0.0);
  bool deterministic = true;
  for (int64_t k = 0; k < K; ++k) {
    onehot[k] = 1.0;
    auto g = grads_for(onehot);
    if (opt.check_determinism && !same_bits(grads_for(onehot), g)) deterministic = false;
    onehot[k] = 0.0;
    for (size_t i = 0; i < xs.size(); ++i) ana[i].insert(ana[i].end(), g[i].begin(), g[i].end());
  }
  if (!deterministic) {
    report.ok = false;
    report.failures.push_back("backward is not deterministic: two runs with the same output gradient differ");
  }

  if (opt.check_linearity && K > 0) {
    std::vector<double> v(K), v2(K);
    for (int64_t k = 0; k < K; ++k) {
      v[k] = 0.5 + 0.25 * static_cast<double>(k % 7);
      v2[k] = 2.0 * v[k];
    }
    auto g1 = grads_for(v), g2 = grads_for(v2);
    for (size_t i = 0; i < xs.size(); ++i)
      for (size_t j = 0; j < g1[i].size(); ++j)
        if (std::abs(g2[i][j] - 2.0 * g1[i][j]) > opt.atol + opt.rtol * std::abs(2.0 * g1[i][j])) {
          report.ok = false;
          report.failures.push_back(fmt::format("input {}: backward does not scale with the output gradient "
                                                "(element {}: grad·2 gives {}, expected {})", i, j, g2[i][j], 2.0 * g1[i][j]));
          break;
        }
  }

  // Numeric Jacobian, column by column, and the comparison.
  for (size_t i = 0; i < xs.size(); ++i) {
    InputReport r;
    r.input = i;
    const Tensor& x = xs[i];
    if (!x.defined() || !x.requires_grad()) {
      report.inputs.push_back(r);
      continue;
    }
    r.checked = true;
    const std::vector<int64_t> offs = element_offsets(x);
    const int64_t N = x.numel();
    double worst_excess = -1;
    for (int64_t j = 0; j < N; ++j) {
      const double orig = get(x, offs[j]);
      set(x, offs[j], orig + opt.eps);
      const std::vector<double> plus = eval();
      set(x, offs[j], orig - opt.eps);
      const std::vector<double> minus = eval();
      set(x, offs[j], orig);
      for (int64_t k = 0; k < K; ++k) {
        const double num = (plus[k] - minus[k]) / (2 * opt.eps);
        const double an = ana[i][k * N + j];
        const double abs_err = std::abs(an - num);
        const double rel_err = abs_err / std::max(std::abs(num), 1e-300);
        r.max_abs_err = std::max(r.max_abs_err, abs_err);
        if (abs_err > opt.atol) r.max_rel_err = std::max(r.max_rel_err, rel_err);
        // The worst element is the one closest to (or furthest past) its tolerance.
        const double excess = abs_err / (opt.atol + opt.rtol * std::abs(num));
        if (excess > worst_excess || r.worst_output < 0) {
          worst_excess = excess;
          r.worst_output = k;
          r.worst_input = j;
          r.numerical = num;
          r.analytical = an;
        }
        if (excess > 1 || std::isnan(an) || std::isnan(num)) r.ok = false;
      }
    }
    if (r.worst_input >= 0) r.worst_input_index = unravel(r.worst_input, x.shape());
    if (!r.ok) {
      report.ok = false;
      report.failures.push_back(fmt::format(
          "input {} {}: Jacobian mismatch at input element {} (index {}) for output element {}: numerical {:.8g}, "
          "analytical {:.8g} (abs err {:.3g}, rel err {:.3g}; atol {}, rtol {})", i, shape_str(x.shape()),
          r.worst_input, shape_str(r.worst_input_index), r.worst_output, r.numerical, r.analytical,
          std::abs(r.analytical - r.numerical), std::abs(r.analytical - r.numerical) / std::max(std::abs(r.numerical), 1e-300),
          opt.atol, opt.rtol));
    }
    report.inputs.push_back(r);
  }
  for (Tensor& x : xs)
    if (x.defined() && x.requires_grad()) x.zero_grad();

  if (!report.ok && opt.raise_on_failure) throw GradcheckError("gradcheck: " + report.summary());
  return report;
}

std::string GradcheckReport::summary() const {
  size_t checked = 0;
  for (const auto& r : inputs) checked += r.checked;
  std::string s = fmt::format("gradcheck {} ({} of {} inputs checked)", ok ? "passed" : "FAILED", checked, inputs.size());
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
