// The reverse-mode engine: record() builds the graph during the forward pass;
// run_backward() and grad() walk it once in reverse topological order (walk()),
// recording the backward pass itself under create_graph. Also the members of
// Tensor that need the Node (requires_grad_, set_data_, grad_fn_name, backward).
#include <attograd/autograd/engine.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {
thread_local bool g_grad_enabled = true;
thread_local bool g_anomaly = false;
thread_local BackwardObserver* g_observer = nullptr;
thread_local uint64_t g_sequence = 0;

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shape_str(shapes[i]);
  return s;
}

// A leaf's AccumulateGrad node: made on first use, shared while alive.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl();
  if (auto n = impl->grad_accumulator.lock()) return n;
  auto n = std::make_shared<Node>();
  n->kind = NodeKind::accumulate_grad;
  n->name = "AccumulateGrad";
  n->leaf = leaf.impl_ptr();
  n->input_shapes = {impl->shape};
  n->input_dtypes = {impl->dtype};
  n->output_shape = impl->shape;
  n->output_dtype = impl->dtype;
  n->sequence = g_sequence++;
  impl->grad_accumulator = n;
  return n;
}

// True when no other tensor can see t's values: this handle is the only one
// on its TensorImpl, nothing else shares the storage, and t covers it from the
// start in row-major order. The engine may then add into t, or keep it, in place.
bool sole_owner(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.impl()->storage.use_count() == 1 && t.offset() == 0 &&
         t.is_contiguous();
}

// a + g for two gradients of one tensor (same shape and dtype), recorded:
// how gradients meet while a graph is being created.
Tensor recorded_sum(const Tensor& a, const Tensor& g) {
  return record("add", add_values(a, g), {a, g}, [](const Tensor& grad, Grads& dx) {
    // out = a + g  =>  da = grad,  dg = grad
    dx[0] += grad;
    dx[1] += grad;
  });
}

// leaf.grad += g, in place once the leaf owns a gradient buffer; while a
// graph is being created, a recorded sum (.grad then has a graph).
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g, bool create_graph) {
  if (!leaf.grad) {
    // Keep g itself when nothing else sees it; otherwise own a contiguous
    // copy (g may be a view of, or the same buffer as, another gradient).
    leaf.grad = sole_owner(g) ? g.impl_ptr() : g.clone().impl_ptr();
    return;
  }
  Tensor acc(leaf.grad);
  if (create_graph) leaf.grad = recorded_sum(acc, g).impl_ptr();
  else add_(acc, g);
}
}  // namespace

bool GradMode::get() { return g_grad_enabled; }
void GradMode::set(bool on) { g_grad_enabled = on; }
bool AnomalyMode::get() { return g_anomaly; }
void AnomalyMode::set(bool on) { g_anomaly = on; }
BackwardObserver* BackwardObserverSetting::get() { return g_observer; }
void BackwardObserverSetting::set(BackwardObserver* observer) { g_observer = observer; }

Node::~Node() {
  // Move the edges out and drop the closure first; then unlink every node we
  // are the last owner of, iteratively, so nothing recurses.
  std::vector<std::shared_ptr<Node>> stack = std::move(next);
  backward = nullptr;
  saved.clear();
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n && n.use_count() == 1) {
      for (auto& c : n->next) stack.push_back(std::move(c));
      n->next.clear();
      n->backward = nullptr;  // may drop saved tensors that own nodes now in `stack`
      n->saved.clear();
    }
  }
}

void Grads::accumulate(size_t i, const Tensor& g) {
  const std::string& op = node_.name;
  if (i >= node_.next.size())
    fail<AutogradError>(op, "backward wrote a gradient for input {}, but the op has {} inputs", i,
                        node_.next.size());
  if (!g.defined()) return;
  if (g.shape() != node_.input_shapes[i])
    fail<ShapeError>(op,
                     "gradient for input {} has shape {}, but the input has shape {}; hint: a "
                     "broadcast operand's gradient must go through sum_to",
                     i, shape_str(g.shape()), shape_str(node_.input_shapes[i]));
  if (g.dtype() != node_.input_dtypes[i])
    fail<DTypeError>(op, "gradient for input {} has dtype {}, but the input has dtype {}", i,
                     dtype_name(g.dtype()), dtype_name(node_.input_dtypes[i]));
  if (AnomalyMode::enabled() && !all_finite(g))
    fail<AutogradError>(op, "backward produced a non-finite gradient for input {} (inputs: {})", i,
                        shapes_str(node_.input_shapes));
  if (written_) {
    Tensor& w = (*written_)[i];
    w = w.defined() ? add_values(w, g) : g;
  }
  if (node_.next[i]) sink_(node_.next[i].get(), g);
}

bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  return dispatch_float(t.dtype(), "all_finite", [&]<class T>() {
    bool ok = true;
    const T* p = storage_base<const T>(t);
    for_each_offset(t.shape(), t.strides(), t.offset(), [&](int64_t o) { ok = ok && std::isfinite(p[o]); });
    return ok;
  });
}

namespace {
bool has_nan_or_pos_inf(const Tensor& t) {
  return dispatch_float(t.dtype(), "anomaly", [&]<class T>() {
    bool bad = false;
    const T* p = storage_base<const T>(t);
    for_each_offset(t.shape(), t.strides(), t.offset(), [&](int64_t o) { bad = bad || std::isnan(p[o]) || p[o] == INFINITY; });
    return bad;
  });
}
}  // namespace

namespace {
bool any_requires_grad(const Tensor* first, const Tensor* last) {
  if (!GradMode::enabled()) return false;
  return std::any_of(first, last, [](const Tensor& t) { return t.defined() && t.requires_grad(); });
}
}  // namespace

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  return any_requires_grad(inputs.begin(), inputs.end());
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  return any_requires_grad(inputs.data(), inputs.data() + inputs.size());
}

size_t saved_bytes(const SavedTensor& s) {
  return s.value.defined() ? static_cast<size_t>(s.value.numel()) * dtype_size(s.value.dtype()) : 0;
}

const Tensor& Grads::saved(size_t k) const {
  if (k >= node_.saved.size())
    fail<AutogradError>(node_.name, "backward asked for saved tensor {}, but record() registered {}; hint: list "
                        "every tensor the closure reads in record's saved list", k, node_.saved.size());
  return node_.saved[k].value;
}

Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs, std::vector<SavedTensor> saved,
              BackwardFn backward) {
  const Node* had = out.defined() ? out.grad_fn().get() : nullptr;
  Tensor r = record(op, std::move(out), inputs, std::move(backward));
  if (!r.defined() || !r.grad_fn() || r.grad_fn().get() == had) return r;
  for (size_t k = 0; k < saved.size(); ++k) {
    const Tensor& v = saved[k].value;
    if (!v.defined()) continue;
    for (size_t i = 0; i < inputs.size() && !saved[k].shares; ++i)
      if (inputs[i].defined() && v.shares_storage(inputs[i])) saved[k].shares = fmt::format("input {}", i);
    if (!saved[k].shares && v.shares_storage(r)) saved[k].shares = "out";
    for (size_t j = 0; j < k && !saved[k].shares; ++j)
      if (saved[j].value.defined() && v.shares_storage(saved[j].value)) saved[k].shares = saved[j].name;
  }
  r.grad_fn()->saved = std::move(saved);
  return r;
}

Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  if (!GradMode::enabled()) return out;
  // Checked only while recording: the engine runs backward math under
  // NoGradGuard, and an inf made there must be reported by the Grads check as
  // the op whose backward produced it, not as a "forward" of a helper op.
  // Forward flags NaN and +Inf only: -Inf is how masks enter (masked_fill
  // before a softmax), so it is a legitimate forward value.
  if (AnomalyMode::enabled() && is_floating(out.dtype()) && has_nan_or_pos_inf(out)) {
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.defined() ? t.shape() : Shape{});
    fail<AutogradError>(op, "forward produced NaN or +Inf (output {}, inputs: {})",
                        shape_str(out.shape()), shapes_str(shapes));
  }
  if (!any_requires_grad(inputs)) return out;
  if (out.grad_fn())
    fail<AutogradError>(op, "record() needs a fresh output tensor, got one that already has grad_fn <{}>",
                        out.grad_fn_name());
  auto node = std::make_shared<Node>();
  node->name = std::string(op);
  node->backward = std::move(backward);
  node->output_shape = out.shape();
  node->output_dtype = out.dtype();
  for (const Tensor& t : inputs) {
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
    if (!t.defined() || !t.requires_grad()) node->next.push_back(nullptr);
    else if (t.grad_fn()) node->next.push_back(t.grad_fn());
    else node->next.push_back(grad_accumulator(t));
  }
  node->sequence = g_sequence++;
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

Tensor record(std::string_view op, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward) {
  return record(op, std::move(out), std::vector<Tensor>(inputs), std::move(backward));
}

namespace {
// The gradient to start from at `root`: `given`, checked, or 1 for a
// one-element root. `op` names the caller in errors.
Tensor root_grad(std::string_view op, const Tensor& root, const Tensor& given) {
  if (!root.defined()) fail<AutogradError>(op, "called on an undefined tensor");
  if (!root.requires_grad())
    fail<AutogradError>(op,
                        "tensor {} does not require grad and has no grad_fn; hint: call "
                        "requires_grad_() on the leaves you want gradients for",
                        shape_str(root.shape()));
  if (!given.defined()) {
    if (root.numel() != 1)
      fail<AutogradError>(op,
                          "grad can be implicitly created only for a one-element output, got shape "
                          "{}; hint: pass a gradient of that shape, or reduce with sum()/mean()",
                          shape_str(root.shape()));
    return Tensor::ones(root.shape(), root.dtype());
  }
  if (given.shape() != root.shape())
    fail<ShapeError>(op, "gradient has shape {}, but the output has shape {}",
                     shape_str(given.shape()), shape_str(root.shape()));
  if (given.dtype() != root.dtype())
    fail<DTypeError>(op, "gradient has dtype {}, but the output {} has dtype {}; hint: "
                     "convert it with .to()", dtype_name(given.dtype()), shape_str(root.shape()),
                     dtype_name(root.dtype()));
  return given;
}

// The node a gradient for t enters: its grad_fn, or its AccumulateGrad for a leaf.
std::shared_ptr<Node> entry_node(const Tensor& t) { return t.grad_fn() ? t.grad_fn() : grad_accumulator(t); }

// The leaf's post-accumulate hooks, in registration order (over a copy: a
// hook may remove itself or register another).
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (leaf->post_accumulate_hooks.empty()) return;
  const auto hooks = leaf->post_accumulate_hooks;
  const Tensor t(leaf);
  for (const auto& [id, hook] : hooks) hook(t);
}

// ---- The walk: a topological order, then each node in it --------------------

// How many edges point at each node reachable from roots (an iterative DFS,
// so a deep graph cannot overflow the stack).
std::unordered_map<Node*, int> count_dependencies(const std::vector<std::shared_ptr<Node>>& roots) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (const auto& r : roots)
    if (deps.try_emplace(r.get(), 0).second) stack.push_back(r.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& c : n->next) {
      if (!c) continue;
      auto [it, fresh] = deps.try_emplace(c.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(c.get());
    }
  }
  return deps;
}

// Every node reachable from roots, each after all of its consumers (Kahn's
// algorithm): when a node's turn comes, every op that read its output has
// already sent it a share of the gradient.
std::vector<Node*> topological_order(const std::vector<std::shared_ptr<Node>>& roots) {
  std::unordered_map<Node*, int> deps = count_dependencies(roots);
  std::vector<Node*> order, ready;
  for (const auto& r : roots)
    if (deps[r.get()] == 0 && std::find(ready.begin(), ready.end(), r.get()) == ready.end()) ready.push_back(r.get());
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    order.push_back(n);
    for (const auto& c : n->next)
      if (c && --deps[c.get()] == 0) ready.push_back(c.get());
  }
  return order;
}

// For grad(): the op nodes worth running, those with an input that is a
// target or leads to one. One sweep over `order` reversed, so a node's
// inputs are settled before the node.
std::unordered_set<Node*> nodes_leading_to(const std::vector<Node*>& order, const std::vector<Node*>& targets) {
  std::unordered_set<Node*> leads(targets.begin(), targets.end()), runs;
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    for (const auto& c : (*it)->next)
      if (c && leads.contains(c.get())) {
        runs.insert(*it);
        leads.insert(*it);
        break;
      }
  return runs;
}

// One walk's state: the gradient waiting at each node, and what the walk is
// for. Without targets (backward()) gradients reach the leaves' .grad; with
// them (grad()) the gradient arriving at targets[j] becomes result[j], no
// .grad is touched, and only the op nodes in `runs` run.
struct Walk {
  bool retain_graph = false, create_graph = false;
  std::vector<Node*> targets;
  std::unordered_set<Node*> runs;
  std::unordered_map<Node*, Tensor> waiting;
  std::vector<Tensor> result;

  bool capture() const { return !targets.empty(); }

  // A consumer's share g of `to`'s gradient. A second share is added into the
  // first in place when nothing else sees that buffer (else into a fresh
  // sum): the residual stream's gradients meet at every block. While a graph
  // is being created the sum is recorded.
  void send(Node* to, const Tensor& g) {
    auto [it, fresh] = waiting.try_emplace(to, g);
    if (fresh) return;
    if (create_graph) it->second = recorded_sum(it->second, g);
    else if (sole_owner(it->second)) add_(it->second, g);
    else it->second = add_values(it->second, g);
  }
};

// Frees n's closure and saved tensors once its backward ran (no
// retain_graph), noting the allocator bytes that gave back.
void release(Node& n) {
  const Allocator& alloc = default_allocator();
  const size_t in_use = alloc.bytes_in_use();
  n.backward = nullptr;
  n.saved.clear();
  n.released = true;
  n.freed_bytes = in_use - std::min(in_use, alloc.bytes_in_use());
}

// Op node n's backward on its gradient g: each input's share goes to
// w.send (and to *written, for an observer).
void run_closure(Walk& w, Node& n, const Tensor& g, std::vector<Tensor>* written) {
  if (n.released)
    fail<AutogradError>(n.name,
                        "trying to backward through the graph a second time, but its saved tensors were "
                        "freed; hint: pass retain_graph=true to the first backward()");
  Grads dx(n, [&w](Node* to, const Tensor& share) { w.send(to, share); }, w.create_graph, written);
  n.backward(g, dx);
  if (!w.retain_graph) release(n);
}

// Node n's turn: its gradient, summed from every consumer, goes into the
// leaf's .grad (an accumulator, whose hooks then run) or through the op's
// backward to its inputs; the observer sees both. No gradient: nothing runs.
void run_node(Walk& w, Node& n) {
  auto it = w.waiting.find(&n);
  if (it == w.waiting.end()) return;
  Tensor g = std::move(it->second);
  w.waiting.erase(it);
  BackwardObserver* observer = g_observer;
  std::vector<Tensor> written;
  if (observer) {
    observer->before(n, g);
    written.resize(n.next.size());
  }
  for (size_t j = 0; j < w.targets.size(); ++j)
    if (w.targets[j] == &n) w.result[j] = g;
  if (n.kind == NodeKind::accumulate_grad) {
    if (auto leaf = n.leaf.lock(); leaf && !w.capture()) {
      accumulate_into_leaf(*leaf, g, w.create_graph);
      run_post_accumulate_hooks(leaf);
    }
    if (observer) written = {g};
  } else if (!w.capture() || w.runs.contains(&n)) {
    run_closure(w, n, g, observer ? &written : nullptr);
  }
  if (observer) observer->after(n, g, written);
}

// One walk of the graph, shared by backward() and grad() (see Walk): like
// micrograd's backward, a topological order, then each node in it.
std::vector<Tensor> walk(const std::vector<std::shared_ptr<Node>>& roots, const std::vector<Tensor>& grads,
                         bool retain_graph, bool create_graph, const std::vector<Node*>& targets) {
  GradModeGuard mode(create_graph);  // backward math is recorded only when creating a graph
  const std::vector<Node*> order = topological_order(roots);
  Walk w;
  w.retain_graph = retain_graph;
  w.create_graph = create_graph;
  w.targets = targets;
  if (w.capture()) w.runs = nodes_leading_to(order, targets);
  w.result.resize(targets.size());
  for (size_t i = 0; i < roots.size(); ++i) w.send(roots[i].get(), grads[i]);
  for (Node* n : order) run_node(w, *n);
  return std::move(w.result);
}
}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph, bool create_graph) {
  const Tensor grad = root_grad("backward", root, grad_in);
  walk({entry_node(root)}, {grad}, retain_graph || create_graph, create_graph, {});
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, const GradOptions& opt) {
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    fail<ValueError>("grad", "got {} grad_outputs for {} outputs; hint: pass one per output, or none",
                     grad_outputs.size(), outputs.size());
  if (outputs.empty()) fail<ValueError>("grad", "needs at least one output");
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<Tensor> grads;
  for (size_t k = 0; k < outputs.size(); ++k) {
    grads.push_back(root_grad("grad", outputs[k], grad_outputs.empty() ? Tensor() : grad_outputs[k]));
    roots.push_back(entry_node(outputs[k]));
  }
  std::vector<std::shared_ptr<Node>> keep;  // targets stay alive for the walk
  std::vector<Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad())
      fail<AutogradError>("grad", "input {} does not require grad; hint: call requires_grad_() on it before the "
                          "forward pass", i);
    keep.push_back(entry_node(x));
    targets.push_back(keep.back().get());
  }
  if (targets.empty()) fail<ValueError>("grad", "needs at least one input");
  std::vector<Tensor> result = walk(roots, grads, opt.retain_graph || opt.create_graph, opt.create_graph, targets);
  for (size_t i = 0; i < result.size(); ++i)
    if (!result[i].defined() && !opt.allow_unused)
      fail<AutogradError>("grad", "input {} {} was not used to compute the outputs; hint: pass allow_unused = true "
                          "to get an undefined gradient for it", i, shape_str(inputs[i].shape()));
  return result;
}

namespace {
// x's values with grad_fn `fn`: how a saved tensor rejoins the graph.
Tensor with_history(const Tensor& saved, std::shared_ptr<Node> fn) {
  Tensor t = make_view(saved, saved.shape(), saved.strides(), saved.offset());
  t.impl()->grad_fn = std::move(fn);
  t.impl()->requires_grad = true;
  return t;
}
}  // namespace

Tensor Grads::input(size_t i, const Tensor& saved) const {
  if (!create_graph_ || !saved.defined() || !needs(i)) return saved;
  if (saved.shape() != node_.input_shapes[i])
    fail<AutogradError>(node_.name, "saved tensor for input {} has shape {}, but the input has shape {}", i,
                        shape_str(saved.shape()), shape_str(node_.input_shapes[i]));
  const std::shared_ptr<Node>& producer = node_.next[i];
  if (producer->kind != NodeKind::accumulate_grad) return with_history(saved, producer);
  if (auto leaf = producer->leaf.lock()) return Tensor(leaf);  // the leaf itself
  return saved;  // the leaf took new data since (set_data_): nothing to reach
}

Tensor Grads::output(const Tensor& saved) const {
  if (!create_graph_ || !saved.defined()) return saved;
  return with_history(saved, node_.shared_from_this());
}

void twin_backward(Grads& dx, const Tensor& grad, const std::vector<Tensor>& inputs,
                   const std::function<Tensor(const std::vector<Tensor>&)>& twin) {
  // Fresh aliases z of the inputs, so the nested grad() stops at them and
  // gives each input's own gradient; their node passes it on unchanged.
  std::vector<Tensor> z, wanted;
  std::vector<size_t> which;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!dx.needs(i) || !x.defined() || !x.requires_grad()) {
      z.push_back(x);
      continue;
    }
    z.push_back(record("twin_input", make_view(x, x.shape(), x.strides(), x.offset()), {x},
                       [](const Tensor& g, Grads& d) { d[0] += g; }));
    wanted.push_back(z.back());
    which.push_back(i);
  }
  if (wanted.empty()) return;
  const Tensor out = twin(z);
  GradOptions opt;
  opt.create_graph = true;
  opt.allow_unused = true;
  const std::vector<Tensor> g = attograd::grad({out}, wanted, {grad}, opt);
  for (size_t j = 0; j < which.size(); ++j)
    if (g[j].defined()) dx[which[j]] += g[j];
}

namespace {
uint64_t g_next_hook_id = 1;  // ids are only compared on one leaf; the counter is shared by all threads
std::mutex g_hook_mutex;
}  // namespace

GradHookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  constexpr std::string_view op = "register_post_accumulate_grad_hook";
  if (!leaf.defined()) fail<AutogradError>(op, "called on an undefined tensor");
  if (leaf.grad_fn())
    fail<AutogradError>(op, "expected a leaf, got a tensor made by <{}>; hint: register it on the parameter",
                        leaf.grad_fn_name());
  if (!leaf.requires_grad())
    fail<AutogradError>(op, "the leaf {} does not require grad, so no gradient will ever reach it; hint: call "
                        "requires_grad_() first", shape_str(leaf.shape()));
  if (!hook) fail<ValueError>(op, "got an empty hook");
  uint64_t id = 0;
  {
    std::lock_guard lock(g_hook_mutex);
    id = g_next_hook_id++;
  }
  leaf.impl()->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return GradHookHandle(leaf.impl_ptr(), id);
}

void GradHookHandle::remove() {
  if (auto leaf = leaf_.lock()) std::erase_if(leaf->post_accumulate_hooks, [&](const auto& h) { return h.first == id_; });
  leaf_.reset();
}

GradHookHandle& GradHookHandle::operator=(GradHookHandle&& o) noexcept {
  if (this != &o) {
    remove();
    leaf_ = std::move(o.leaf_);
    id_ = o.id_;
    o.leaf_.reset();
  }
  return *this;
}

// ---- Tensor's members that need the Node ------------------------------------

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  if (impl_->grad_fn)
    fail<AutogradError>("requires_grad_", "can only be set on leaves; this tensor comes from <{}>; "
                        "hint: use detach().requires_grad_()", impl_->grad_fn->name);
  if (on && !is_floating(impl_->dtype))
    fail<DTypeError>("requires_grad_", "only floating tensors (f32 or f64) can require grad, got {}{}",
                     dtype_name(impl_->dtype),
                     impl_->dtype == DType::bf16 ? ", which is for storage only (no op computes in it); hint: make "
                                                   "the f32 copy, .to(DType::f32), the leaf" : "");
  impl_->requires_grad = on;
  return *this;
}

void Tensor::set_data_(const Tensor& src) {
  check_defined("set_data_");
  src.check_defined("set_data_");
  if (impl_->grad_fn)
    fail<AutogradError>("set_data_", "can only be called on a leaf; this tensor comes from <{}>; "
                        "hint: call it on the parameter itself, or use detach()", impl_->grad_fn->name);
  if (impl_->requires_grad && !is_floating(src.dtype()))
    fail<DTypeError>("set_data_", "this tensor requires grad, so its data must be floating, got {}; "
                     "hint: convert with .to(DType::f32) or call requires_grad_(false) first",
                     dtype_name(src.dtype()));
  const TensorImpl& s = *src.impl_;
  impl_->storage = s.storage;
  impl_->offset = s.offset;
  impl_->shape = s.shape;
  impl_->strides = s.strides;
  impl_->dtype = s.dtype;
  impl_->grad.reset();
  // Graphs recorded before hold gradients for the old data: unlink their
  // AccumulateGrad node, and let the next graph make a fresh one.
  if (auto acc = impl_->grad_accumulator.lock()) acc->leaf.reset();
  impl_->grad_accumulator.reset();
}

std::string Tensor::grad_fn_name() const { return grad_fn() ? grad_fn()->name : ""; }

void Tensor::backward(const Tensor& grad, bool retain_graph, bool create_graph) const {
  run_backward(*this, grad, retain_graph, create_graph);
}

}  // namespace attograd
