#include <attograd/optim/optimizer.h>

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/ranges.h>

#include <attograd/autograd/engine.h>

namespace attograd::optim {

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr,
                     double default_weight_decay, std::vector<std::string> slots)
    : name_(std::move(name)),
      default_lr_(default_lr),
      default_weight_decay_(default_weight_decay),
      slots_(std::move(slots)) {
  check_arg(default_lr >= 0, "lr", default_lr, ">= 0");
  check_arg(default_weight_decay >= 0, "weight_decay", default_weight_decay, ">= 0");
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  if (total == 0)
    fail<ValueError>(name_, "got an empty parameter list; hint: pass the model's parameters");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::check_arg(bool ok, std::string_view what, double value,
                          std::string_view expected) const {
  if (!ok) fail<ValueError>(name_, "invalid {} {} (expected {})", what, value, expected);
}

void Optimizer::add_param_group(ParamGroup group) {
  Group g{std::move(group.params), group.lr.value_or(default_lr_),
          group.weight_decay.value_or(default_weight_decay_)};
  check_arg(g.lr >= 0, "lr", g.lr, ">= 0");
  check_arg(g.weight_decay >= 0, "weight_decay", g.weight_decay, ">= 0");
  for (size_t k = 0; k < g.params.size(); ++k) {
    const Tensor& p = g.params[k];
    if (!p.defined())
      fail<ValueError>(name_, "parameter {} of group {} is an undefined tensor", k, groups_.size());
    if (!is_floating(p.dtype()))
      fail<DTypeError>(name_, "can only optimize floating tensors, parameter {} of group {} is {}",
                       k, groups_.size(), dtype_name(p.dtype()));
    if (!p.is_leaf())
      fail<ValueError>(name_, "can't optimize a non-leaf tensor (parameter {} of group {} comes "
                       "from <{}>); hint: use x.detach().requires_grad_()", k, groups_.size(),
                       p.grad_fn_name());
    auto same = [&](const Tensor& q) { return q.is_same(p); };
    bool seen = std::any_of(g.params.begin(), g.params.begin() + static_cast<std::ptrdiff_t>(k), same);
    for (const Group& other : groups_)
      seen = seen || std::any_of(other.params.begin(), other.params.end(), same);
    if (seen)
      fail<ValueError>(name_, "parameter {} of group {} appears more than once; hint: each "
                       "parameter may belong to one group only", k, groups_.size());
  }
  state_.resize(state_.size() + g.params.size());
  groups_.push_back(std::move(g));
}

Optimizer::Group& Optimizer::param_group(size_t g) {
  if (g >= groups_.size())
    fail<IndexError>(name_, "param_group {} is out of range (the optimizer has {} groups)", g,
                     groups_.size());
  return groups_[g];
}

void Optimizer::set_lr(double lr) {
  check_arg(lr >= 0, "lr", lr, ">= 0");
  for (Group& g : groups_) g.lr = lr;
}

void Optimizer::step() {
  NoGradGuard no_grad;
  size_t index = 0;
  for (const Group& g : groups_) {
    for (const Tensor& p : g.params) {
      const Tensor grad = p.grad();
      if (grad.defined()) {
        if (grad.shape() != p.shape() || grad.dtype() != p.dtype())
          fail<ShapeError>(name_, "parameter {} is {} {} but its gradient is {} {}", index,
                           shape_str(p.shape()), dtype_name(p.dtype()), shape_str(grad.shape()),
                           dtype_name(grad.dtype()));
        update(g, index, p, grad);
        p.bump_version();  // update() wrote through data<T>(): what was derived from p is stale
      }
      ++index;
    }
  }
}

void Optimizer::zero_grad() {
  for (Group& g : groups_)
    for (Tensor& p : g.params) p.zero_grad();
}

// ---- state_dict ---------------------------------------------------------------

namespace {

std::string group_key(size_t g, std::string_view field) {
  return fmt::format("param_groups.{}.{}", g, field);
}
std::string state_key(size_t i, std::string_view slot) { return fmt::format("state.{}.{}", i, slot); }

Tensor copy_of(const Tensor& t) {
  NoGradGuard no_grad;
  return t.clone();
}

// "state.<i>.<slot>" -> i; nullopt for any other key.
std::optional<size_t> state_index(const std::string& key) {
  constexpr std::string_view prefix = "state.";
  if (key.rfind(prefix, 0) != 0) return std::nullopt;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + key.size();
  size_t i = 0;
  auto [ptr, ec] = std::from_chars(first, last, i);
  if (ec != std::errc() || ptr == first || ptr == last || *ptr != '.') return std::nullopt;
  return i;
}

}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict dict;
  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    dict[group_key(g, "lr")] = Tensor::scalar(groups_[g].lr, DType::f64);
    dict[group_key(g, "weight_decay")] = Tensor::scalar(groups_[g].weight_decay, DType::f64);
    std::vector<int64_t> ids(groups_[g].params.size());
    for (int64_t& id : ids) id = static_cast<int64_t>(index++);
    dict[group_key(g, "params")] = Tensor::from_vector(ids, {static_cast<int64_t>(ids.size())});
  }
  for (const auto& [name, value] : options()) dict["options." + name] = Tensor::scalar(value, DType::f64);
  for (size_t i = 0; i < state_.size(); ++i)
    for (size_t s = 0; s < state_[i].size(); ++s) dict[state_key(i, slots_[s])] = copy_of(state_[i][s]);
  return dict;
}

void Optimizer::validate(const StateDict& dict) const {
  const std::string op = name_ + ".load_state_dict";
  std::set<std::string> expected;
  auto need = [&](const std::string& key, DType dtype, const Shape& shape) -> const Tensor& {
    expected.insert(key);
    auto it = dict.find(key);
    if (it == dict.end())
      fail<ValueError>(op, "missing key '{}'; hint: was the dict saved by a {} over the same "
                       "parameter groups?", key, name_);
    const Tensor& t = it->second;
    if (!t.defined()) fail<ValueError>(op, "key '{}' holds an undefined tensor", key);
    if (t.dtype() != dtype)
      fail<DTypeError>(op, "key '{}' has dtype {}, expected {}", key, dtype_name(t.dtype()),
                       dtype_name(dtype));
    if (t.shape() != shape)
      fail<ShapeError>(op, "key '{}' has shape {}, expected {}", key, shape_str(t.shape()),
                       shape_str(shape));
    return t;
  };

  size_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (const char* field : {"lr", "weight_decay"}) {
      const double v = need(group_key(g, field), DType::f64, {}).item();
      if (!(v >= 0)) fail<ValueError>(op, "key '{}' holds {}, expected >= 0", group_key(g, field), v);
    }
    const int64_t n = static_cast<int64_t>(groups_[g].params.size());
    if (auto it = dict.find(group_key(g, "params")); it != dict.end() && it->second.defined() &&
                                                     it->second.numel() != n)
      fail<ValueError>(op, "key '{}' lists {} parameters, but group {} of this {} has {}; the saved "
                       "parameter groups differ", group_key(g, "params"), it->second.numel(), g, name_, n);
    const std::vector<int64_t> ids = need(group_key(g, "params"), DType::i64, {n}).to_vector<int64_t>();
    for (int64_t k = 0; k < n; ++k)
      if (ids[k] != static_cast<int64_t>(index + k))
        fail<ValueError>(op, "key '{}' lists parameter {} at position {}, expected {}; the saved "
                         "groups are ordered differently", group_key(g, "params"), ids[k], k, index + k);
    index += static_cast<size_t>(n);
  }
  for (const auto& [name, value] : options()) {
    const std::string key = "options." + name;
    const double saved = need(key, DType::f64, {}).item();
    if (saved != value)
      fail<ValueError>(op, "key '{}' holds {}, but this optimizer has {} = {}; hint: construct the "
                       "optimizer with the saved hyper-parameters", key, saved, name, value);
  }
  // State: each parameter has all of its slots (it was updated) or none.
  index = 0;
  for (const Group& g : groups_) {
    for (const Tensor& p : g.params) {
      const bool any = std::any_of(slots_.begin(), slots_.end(),
                                   [&](const std::string& s) { return dict.count(state_key(index, s)) > 0; });
      for (const std::string& s : slots_) {
        if (!any) break;
        const bool is_step = s == "step";
        const Tensor& t = need(state_key(index, s), is_step ? DType::i64 : p.dtype(),
                               is_step ? Shape{} : p.shape());
        if (is_step && t.item() < 0)
          fail<ValueError>(op, "key '{}' holds a negative step count {}", state_key(index, s), t.item());
      }
      ++index;
    }
  }
  for (const auto& [key, t] : dict) {
    if (expected.count(key)) continue;
    if (auto i = state_index(key); i && *i >= state_.size())
      fail<ValueError>(op, "unexpected key '{}': this {} has {} parameters", key, name_, state_.size());
    fail<ValueError>(op, "unexpected key '{}'; this {} saves param_groups.<g>.{{lr, weight_decay, "
                     "params}}, options.* and state.<i>.{{{}}}", key, name_, fmt::join(slots_, ", "));
  }
}

void Optimizer::load_state_dict(const StateDict& dict) {
  validate(dict);
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].lr = dict.at(group_key(g, "lr")).item();
    groups_[g].weight_decay = dict.at(group_key(g, "weight_decay")).item();
  }
  for (size_t i = 0; i < state_.size(); ++i) {
    state_[i].clear();
    if (slots_.empty() || !dict.count(state_key(i, slots_.front()))) continue;
    for (const std::string& s : slots_) state_[i].push_back(copy_of(dict.at(state_key(i, s))));
  }
}

}  // namespace attograd::optim
