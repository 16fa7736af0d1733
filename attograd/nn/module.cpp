#include <attograd/nn/module.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include <attograd/autograd/engine.h>

namespace attograd {

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    fail<ValueError>(type_name_, "invalid member name '{}': must be non-empty and contain no '.'", name);
  auto taken = [&](const std::string& n) {
    for (auto& [k, v] : params_) if (k == n) return true;
    for (auto& b : buffers_) if (b.name == n) return true;
    for (auto& [k, v] : children_) if (k == n) return true;
    return false;
  };
  if (taken(name)) fail<ValueError>(type_name_, "'{}' is already registered", name);
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  if (!t.defined()) fail<ValueError>(type_name_, "parameter '{}' is undefined", name);
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::replace_parameter(const std::string& name, Tensor t) {
  for (auto& [n, p] : params_)
    if (n == name) {
      if (t.shape() != p.shape() || t.dtype() != p.dtype())
        fail<ShapeError>(type_name_, "replace_parameter '{}': new tensor {} {} does not match {} {}", name,
                         shape_str(t.shape()), dtype_name(t.dtype()), shape_str(p.shape()), dtype_name(p.dtype()));
      p = t;
      return t;
    }
  fail<ValueError>(type_name_, "replace_parameter: no parameter named '{}'", name);
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  check_new_name(name);
  buffers_.push_back({name, t, persistent});
  return t;
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool params,
                     bool persistent_only) const {
  if (params) {
    for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  } else {
    for (auto& b : buffers_)
      if (!persistent_only || b.persistent) out.emplace_back(prefix + b.name, b.t);
  }
  for (auto& [n, m] : children_) m->collect(prefix + n + ".", out, params, persistent_only);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true, false);
  // A parameter shared by two modules (tied embeddings) is listed once, first name wins.
  std::set<const void*> seen;
  std::erase_if(out, [&](const auto& p) { return !seen.insert(p.second.id()).second; });
  return out;
}

TensorNames Module::parameter_names() const {
  TensorNames names;
  for (auto& [name, t] : named_parameters()) names.emplace(t.id(), name);
  return names;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false, false);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  on_train(on);
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

TensorMap Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", all, true, false);
  collect("", all, false, true);
  return TensorMap(all.begin(), all.end());
}

void Module::load_state_dict(const TensorMap& state, bool strict) {
  const TensorMap mine = state_dict();
  if (strict) {
    std::vector<std::string> missing, unexpected;
    for (auto& [k, v] : mine) if (!state.count(k)) missing.push_back(k);
    for (auto& [k, v] : state) if (!mine.count(k)) unexpected.push_back(k);
    // A crafted file may name 100,000 keys: the message shows the first few.
    auto some = [](const std::vector<std::string>& keys) {
      constexpr size_t kShown = 8;
      const size_t n = std::min(keys.size(), kShown);
      std::string out = fmt::format("{}", fmt::join(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n), ", "));
      if (keys.size() > n) out += fmt::format(", ... and {} more", keys.size() - n);
      return out;
    };
    if (!missing.empty() || !unexpected.empty())
      fail<ValueError>("load_state_dict", "{}: missing keys [{}], unexpected keys [{}]; hint: pass strict=false to "
                       "load a subset", type_name_, some(missing), some(unexpected));
  }
  for (auto& [k, dst] : mine) {
    auto it = state.find(k);
    if (it == state.end()) continue;
    const Tensor& src = it->second;
    if (src.shape() != dst.shape())
      fail<ShapeError>("load_state_dict", "key '{}': checkpoint has shape {}, the model has {}", k,
                       shape_str(src.shape()), shape_str(dst.shape()));
    // A bf16 checkpoint (the common way to share weights) widens exactly into
    // f32 or f64 parameters, as PyTorch's copy_ does; any other difference
    // would round or reinterpret, so it is the caller's explicit choice.
    const bool widens = src.dtype() == DType::bf16 && is_floating(dst.dtype());
    if (src.dtype() != dst.dtype() && !widens)
      fail<DTypeError>("load_state_dict", "key '{}': checkpoint has dtype {}, the model has {}; hint: {}", k,
                       dtype_name(src.dtype()), dtype_name(dst.dtype()),
                       is_floating(src.dtype()) ? fmt::format("call module.to({}) first", dtype_name(src.dtype()))
                                                : std::string("was the checkpoint written for this model?"));
    Tensor d = dst;
    d.copy_(src);
  }
}

namespace {
// Give t a converted copy of its data in place, so every handle (module
// members, optimizer lists) sees the new dtype.
void convert_in_place(Tensor t, DType dtype) {
  if (t.dtype() == dtype || !is_floating(t.dtype())) return;
  Tensor converted = Tensor::empty(t.shape(), dtype);
  converted.copy_(t);
  t.set_data_(converted);
}
}  // namespace

void Module::to(DType dtype) {
  if (!is_floating(dtype)) fail<DTypeError>("Module::to", "modules convert to f32 or f64, got {}", dtype_name(dtype));
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", all, true, false);
  collect("", all, false, false);
  for (auto& [n, t] : all) convert_in_place(t, dtype);
}

DType Module::dtype() const {
  auto ps = parameters();
  return ps.empty() ? DType::f32 : ps[0].dtype();
}

std::string Module::repr() const {
  std::string s = type_name_ + "(" + extra_repr();
  std::vector<std::string> lines;
  for (auto& [n, t] : params_)
    lines.push_back(fmt::format("({}): Parameter{} {}", n, shape_str(t.shape()), dtype_name(t.dtype())));
  for (auto& [n, m] : children_) {
    std::string child = m->repr();
    std::string indented;
    for (char c : child) indented += c == '\n' ? std::string("\n  ") : std::string(1, c);
    lines.push_back(fmt::format("({}): {}", n, indented));
  }
  if (lines.empty()) return s + ")";
  for (auto& l : lines) s += "\n  " + l;
  return s + "\n)";
}

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> items) : Sequential() {
  for (auto& m : items) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = m->forward(h);
  return h;
}

}  // namespace attograd
