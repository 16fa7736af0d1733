#include <attograd/autograd/trace.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string grad_str(const GradInfo& g) {
  return g.defined ? fmt::format("{} {:.4g}", shape_str(g.shape), g.norm) : "-";
}

nlohmann::ordered_json grad_json(const GradInfo& g) {
  if (!g.defined) return nullptr;
  return {{"shape", g.shape}, {"norm", g.norm}};
}
}  // namespace

std::string leaf_name(const Node& node, const TensorNames& names) {
  auto leaf = node.leaf.lock();
  if (!leaf) return "";
  auto it = names.find(leaf.get());
  return it == names.end() ? "" : it->second;
}

GradInfo grad_info(const Tensor& g) {
  if (!g.defined()) return {};
  double sum = 0;
  if (is_floating(g.dtype())) {
    dispatch_float(g.dtype(), "grad_info", [&]<class T>() {
      const T* p = storage_base<const T>(g);
      for_each_offset(g.shape(), g.strides(), g.offset(), [&](int64_t o) {
        const double v = static_cast<double>(p[o]);
        sum += v * v;
      });
    });
  }
  return {true, g.shape(), std::sqrt(sum)};
}

BackwardTrace::BackwardTrace(TraceOptions options) : options_(std::move(options)), guard_(this) {}

void BackwardTrace::before(const Node& node, const Tensor& grad) {
  TraceRow row;
  row.step = static_cast<int64_t>(rows_.size());
  row.op = node.name;
  row.name = leaf_name(node, options_.names);
  row.grad = grad_info(grad);
  row.node = &node;
  for (const SavedTensor& s : node.saved) row.saved_bytes += saved_bytes(s);
  rows_.push_back(std::move(row));
  open_.emplace_back(rows_.size() - 1, now_ns());
}

void BackwardTrace::after(const Node& node, const Tensor&, const std::vector<Tensor>& input_grads) {
  const auto [index, start_ns] = open_.back();
  open_.pop_back();
  TraceRow& row = rows_[index];
  row.micros = static_cast<double>(now_ns() - start_ns) / 1000.0;
  row.freed_bytes = node.freed_bytes;
  for (const Tensor& g : input_grads) row.input_grads.push_back(grad_info(g));
}

std::string BackwardTrace::table() const {
  std::vector<std::array<std::string, 7>> cells{{"step", "op", "grad in [shape] norm", "grads out", "us", "freed", "saved"}};
  for (const TraceRow& r : rows_) {
    std::string outs;
    for (size_t i = 0; i < r.input_grads.size(); ++i) outs += (i ? ", " : "") + grad_str(r.input_grads[i]);
    const std::string op = r.name.empty() ? r.op : r.op + " " + r.name;
    cells.push_back({std::to_string(r.step), op, grad_str(r.grad), outs, fmt::format("{:.1f}", r.micros),
                     std::to_string(r.freed_bytes), std::to_string(r.saved_bytes)});
  }
  std::array<size_t, 7> width{};
  for (const auto& c : cells)
    for (size_t i = 0; i < c.size(); ++i) width[i] = std::max(width[i], c[i].size());
  std::string out;
  for (const auto& c : cells) {
    std::string line;
    for (size_t i = 0; i < c.size(); ++i) {
      const bool right = i == 0 || i >= 4;  // numbers line up on the right
      line += (i ? "  " : "") + (right ? fmt::format("{:>{}}", c[i], width[i]) : fmt::format("{:<{}}", c[i], width[i]));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

void BackwardTrace::write_jsonl(std::ostream& out) const {
  for (const TraceRow& r : rows_) {
    nlohmann::ordered_json ins = nlohmann::ordered_json::array();
    for (const GradInfo& g : r.input_grads) ins.push_back(grad_json(g));
    nlohmann::ordered_json j = {{"step", r.step},         {"op", r.op}, {"name", r.name}, {"grad", grad_json(r.grad)},
                        {"input_grads", ins},     {"us", r.micros}, {"freed_bytes", r.freed_bytes},
                                {"saved_bytes", r.saved_bytes}};
    out << j.dump() << "\n";
  }
}

}  // namespace attograd
