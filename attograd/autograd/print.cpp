// The Tensor printer (see print.h).
#include <attograd/autograd/print.h>

namespace {
using attograd::Tensor;

// PyTorch's print options: tensors with more than kThreshold elements are
// summarized, showing kEdge items at each end of every longer dim.
constexpr int64_t kThreshold = 1000, kEdge = 3;

enum class Kind { floating, integral, boolean };

std::string format_scalar(double v, Kind kind) {
  if (kind == Kind::boolean) return v != 0 ? "True" : "False";
  if (kind == Kind::integral) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.4f}", v);
}

// Appends dims [dim, ...) starting at element k. Rows of a d-dim block are
// separated by d-1 newlines and aligned under the opening bracket, as PyTorch.
void format_values(std::string& out, const std::vector<double>& v, const attograd::Shape& shape,
                   size_t dim, size_t& k, Kind kind, bool summarize, int indent) {
  if (shape.empty()) {
    out += format_scalar(v[k++], kind);
    return;
  }
  out += '[';
  const int64_t n = shape[dim];
  const bool innermost = dim + 1 == shape.size();
  std::string sep = ",";
  if (innermost) sep += ' ';
  else sep.append(shape.size() - dim - 1, '\n').append(static_cast<size_t>(indent) + 1, ' ');
  const bool elide = summarize && n > 2 * kEdge;
  for (int64_t i = 0; i < n; ++i) {
    if (elide && i == kEdge) {
      out.append("...").append(sep);
      int64_t per = 1;  // elements per index of this dim, skipped for the middle
      for (size_t d = dim + 1; d < shape.size(); ++d) per *= shape[d];
      k += static_cast<size_t>((n - 2 * kEdge) * per);
      i = n - kEdge;
    }
    if (innermost) out += format_scalar(v[k++], kind);
    else format_values(out, v, shape, dim + 1, k, kind, summarize, indent + 1);
    if (i + 1 < n) out += sep;
  }
  out += ']';
}
}  // namespace

fmt::format_context::iterator fmt::formatter<attograd::Tensor>::format(
    const attograd::Tensor& t, fmt::format_context& ctx) const {
  if (!t.defined()) return fmt::formatter<std::string_view>::format("tensor(undefined)", ctx);
  std::string out = "tensor(";
  std::vector<double> v = t.to_vector<double>();
  size_t k = 0;
  const attograd::DType d = t.dtype();
  const Kind kind = d == attograd::DType::b8 ? Kind::boolean
                    : attograd::is_floating(d) || d == attograd::DType::bf16 ? Kind::floating : Kind::integral;
  format_values(out, v, t.shape(), 0, k, kind, t.numel() > kThreshold, 7);
  out += fmt::format(", shape={}, dtype={}", attograd::shape_str(t.shape()), attograd::dtype_name(t.dtype()));
  if (t.grad_fn()) out += fmt::format(", grad_fn=<{}>", t.grad_fn_name());
  else if (t.requires_grad()) out += ", requires_grad=true";
  out += ")";
  return fmt::formatter<std::string_view>::format(out, ctx);
}
