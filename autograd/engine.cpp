// The reverse-mode engine: record() builds the graph during the forward pass;
// run_backward() walks it once in reverse topological order. Also the members
// of Tensor that need the Node (requires_grad_, set_data_, grad_fn_name, backward).
#include <attograd/autograd/engine.h>

#include <cmath>
#include <unordered_map>

#include <attograd/autograd/tensor_impl.h>

namespace attograd {

namespace {
thread_local bool g_grad_enabled = true;
thread_local bool g_anomaly = false;

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
  n->name = "AccumulateGrad";
  n->leaf = leaf.impl_ptr();
  n->input_shapes = {impl->shape};
  n->input_dtypes = {impl->dtype};
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

// leaf.grad += g, in place once the leaf owns a gradient buffer.
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g) {
  if (!leaf.grad) {
    // Keep g itself when nothing else sees it; otherwise own a contiguous
    // copy (g may be a view of, or the same buffer as, another gradient).
    leaf.grad = sole_owner(g) ? g.impl_ptr() : g.clone().impl_ptr();
    return;
  }
  Tensor acc(leaf.grad);
  add_(acc, g);
}
}  // namespace

bool GradMode::enabled() { return g_grad_enabled; }
void GradMode::set_enabled(bool on) { g_grad_enabled = on; }
bool AnomalyMode::enabled() { return g_anomaly; }
void AnomalyMode::set_enabled(bool on) { g_anomaly = on; }

Node::~Node() {
  // Move the edges out and drop the closure first; then unlink every node we
  // are the last owner of, iteratively, so nothing recurses.
  std::vector<std::shared_ptr<Node>> stack = std::move(next);
  backward = nullptr;
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n && n.use_count() == 1) {
      for (auto& c : n->next) stack.push_back(std::move(c));
      n->next.clear();
      n->backward = nullptr;  // may drop saved tensors that own nodes now in `stack`
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

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
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
  bool any = false;
  for (const Tensor& t : inputs) any = any || (t.defined() && t.requires_grad());
  if (!any) return out;
  if (out.grad_fn())
    fail<AutogradError>(op, "record() needs a fresh output tensor, got one that already has grad_fn <{}>",
                        out.grad_fn_name());
  auto node = std::make_shared<Node>();
  node->name = std::string(op);
  node->backward = std::move(backward);
  for (const Tensor& t : inputs) {
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
    if (!t.defined() || !t.requires_grad()) node->next.push_back(nullptr);
    else if (t.grad_fn()) node->next.push_back(t.grad_fn());
    else node->next.push_back(grad_accumulator(t));
  }
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

Tensor record(std::string_view op, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward) {
  return record(op, std::move(out), std::vector<Tensor>(inputs), std::move(backward));
}

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  if (!root.defined()) fail<AutogradError>("backward", "called on an undefined tensor");
  if (!root.requires_grad())
    fail<AutogradError>("backward",
                        "tensor {} does not require grad and has no grad_fn; hint: call "
                        "requires_grad_() on the leaves you want gradients for",
                        shape_str(root.shape()));
  Tensor grad = grad_in;
  if (!grad.defined()) {
    if (root.numel() != 1)
      fail<AutogradError>("backward",
                          "grad can be implicitly created only for a one-element output, got shape "
                          "{}; hint: pass a gradient of that shape, or reduce with sum()/mean()",
                          shape_str(root.shape()));
    grad = Tensor::ones(root.shape(), root.dtype());
  } else if (grad.shape() != root.shape()) {
    fail<ShapeError>("backward", "gradient has shape {}, but the output has shape {}",
                     shape_str(grad.shape()), shape_str(root.shape()));
  } else if (grad.dtype() != root.dtype()) {
    fail<DTypeError>("backward", "gradient has dtype {}, but the output {} has dtype {}; hint: "
                     "convert it with .to()", dtype_name(grad.dtype()), shape_str(root.shape()),
                     dtype_name(root.dtype()));
  }

  NoGradGuard no_grad;  // backward math is not recorded
  if (!root.grad_fn()) {  // a leaf: its gradient is the given one
    accumulate_into_leaf(*root.impl(), grad);
    return;
  }

  // 1. Count, for every reachable node, how many edges point at it (iterative DFS).
  Node* start = root.grad_fn().get();
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start};
  deps[start] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& c : n->next) {
      if (!c) continue;
      auto [it, fresh] = deps.try_emplace(c.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(c.get());
    }
  }

  // 2. Kahn's algorithm: a node runs once every consumer has added its share.
  std::unordered_map<Node*, Tensor> buffers;
  buffers[start] = grad;
  // A second gradient for the same node is added into the first one in place
  // when nothing else sees that buffer (else into a fresh sum): backward
  // accumulates, and the residual stream's gradients meet at every block.
  auto sink = [&](Node* target, const Tensor& g) {
    auto [it, fresh] = buffers.try_emplace(target, g);
    if (fresh) return;
    if (sole_owner(it->second)) add_(it->second, g);
    else it->second = add_values(it->second, g);
  };
  std::vector<Node*> ready{start};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    auto it = buffers.find(n);
    if (it != buffers.end()) {
      Tensor g = std::move(it->second);
      buffers.erase(it);
      if (!n->leaf.expired() || n->name == "AccumulateGrad") {
        if (auto leaf = n->leaf.lock()) accumulate_into_leaf(*leaf, g);
      } else {
        if (n->released)
          fail<AutogradError>(n->name,
                              "trying to backward through the graph a second time, but its saved "
                              "tensors were freed; hint: pass retain_graph=true to the first "
                              "backward()");
        Grads dx(*n, sink);
        n->backward(g, dx);
        if (!retain_graph) {
          n->backward = nullptr;
          n->released = true;
        }
      }
    }
    for (auto& c : n->next)
      if (c && --deps[c.get()] == 0) ready.push_back(c.get());
  }
}

// ---- Tensor's members that need the Node ------------------------------------

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  if (impl_->grad_fn)
    fail<AutogradError>("requires_grad_", "can only be set on leaves; this tensor comes from <{}>; "
                        "hint: use detach().requires_grad_()", impl_->grad_fn->name);
  if (on && !is_floating(impl_->dtype))
    fail<DTypeError>("requires_grad_", "only floating tensors can require grad, got {}",
                     dtype_name(impl_->dtype));
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

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

}  // namespace attograd
