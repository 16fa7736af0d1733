// The reverse-mode engine (engine.cpp): the graph, record() that builds it
// during the forward pass, run_backward() and grad() that walk it, and the
// grad and anomaly modes. Every differentiable op makes one Node: the op's name, an
// edge to the Node that produced each input, and the backward closure written
// right under the op's forward. See docs/autograd.md for the walk-through.
//
// The engine sits on tensor.h (and the kernels under it) only; the ops sit on
// the engine. Gradients are summed with add_ / add_values (tensor.h).
#pragma once
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <attograd/autograd/settings.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

class Grads;

// A tensor an op's backward keeps, registered with record() (see below) so
// that what the graph shows (to_dot's saved_tensors, BackwardTrace's saved bytes) is
// what the closure really reads: the closure gets the values back from the
// node, not from a capture.
struct SavedTensor {
  std::string name;  // the tensor's name in the backward formula: "x", "out", "rstd", ...
  Tensor value;      // undefined: not kept for this call (e.g. mul's operand when the other needs no gradient)
  // Set by record(): what else holds value's storage ("input 1", "out", or an
  // earlier saved tensor's name); none: the node alone keeps it alive.
  std::optional<std::string> shares;
};
// value's size as stored: numel · dtype size (0 when undefined); a view
// counts its own elements, not the storage it shares.
size_t saved_bytes(const SavedTensor& s);

// backward(grad, dx): grad is dL/d(out) with out's shape; write dL/d(input i)
// with `dx[i] += ...` for every i where dx.needs(i). While a graph is being
// created (dx.create_graph()), the closure's math is recorded, so it must be
// built from differentiable ops on dx.input()/dx.output() (see Grads).
using BackwardFn = std::function<void(const Tensor& grad, Grads& dx)>;

// What running a node does: an op's backward closure, or (the node a leaf's
// gradient enters, PyTorch's AccumulateGrad) adding into the leaf's .grad.
enum class NodeKind { op, accumulate_grad };

// One recorded op in the graph: what backward needs to run it (see above).
struct Node : std::enable_shared_from_this<Node> {
  NodeKind kind = NodeKind::op;             // accumulate_grad: set where a leaf's node is made, never by name
  std::string name;                         // for display and errors only: "mul", "matmul", "AccumulateGrad", ...
  std::vector<std::shared_ptr<Node>> next;  // producer of input i; null: input needs no grad
  std::vector<Shape> input_shapes;          // for the check where gradients meet
  std::vector<DType> input_dtypes;          // each input's dtype (f32 for an undefined one); gradients must match
  Shape output_shape;                       // the op's output (a leaf's own shape)
  DType output_dtype = DType::f32;          // the op's output dtype (a leaf's own dtype)
  uint64_t sequence = 0;                    // creation order on this thread: forward order
  BackwardFn backward;                      // freed after use unless retain_graph
  std::vector<SavedTensor> saved;           // what backward keeps (record's list); freed with it
  bool released = false;                    // backward ran and was freed (no retain_graph); running it again throws
  size_t freed_bytes = 0;                   // allocator bytes that releasing backward gave back (saved tensors
                                            // nothing else holds); blurred if other threads allocate meanwhile
  std::weak_ptr<TensorImpl> leaf;           // set on AccumulateGrad nodes only

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Tears down long chains without recursion (a 100,000-op chain must not
  // overflow the stack when its last tensor goes out of scope).
  ~Node();
};

// What a backward closure writes gradients into. `dx[i] += g` checks g's shape
// and dtype against input i (the error names the op and both shapes) and adds
// it to whatever other consumers of that input already contributed.
class Grads {
 public:
  // dx[i]: a handle on input i's gradient, for `dx[i] += g`.
  class Slot {
   public:
    // The gradient of input i of g's node (made by Grads::operator[]).
    Slot(Grads& g, size_t i) : g_(g), i_(i) {}
    // Adds g to input i's gradient; a shape or dtype that does not fit input i
    // is a ShapeError or DTypeError naming the op and both shapes.
    void operator+=(const Tensor& g) { g_.accumulate(i_, g); }
   private:
    Grads& g_;
    size_t i_;
  };
  // The engine makes one per node it runs; sink receives each input's gradient;
  // create_graph records the backward itself (see below); when written is given,
  // each input's gradient is also kept there, for a BackwardObserver.
  Grads(Node& node, std::function<void(Node*, const Tensor&)> sink, bool create_graph = false,
        std::vector<Tensor>* written = nullptr)
      : node_(node), sink_(std::move(sink)), create_graph_(create_graph), written_(written) {}
  // Whether input i wants a gradient: skip computing the ones that do not.
  bool needs(size_t i) const { return i < node_.next.size() && node_.next[i] != nullptr; }
  // dx[i]: where input i's gradient goes (dx[i] += g).
  Slot operator[](size_t i) { return Slot(*this, i); }
  // The node whose backward is running (its op name and input shapes).
  const Node& node() const { return node_; }
  // The k-th tensor record() registered as saved for this node (an
  // AutogradError when there is none: the closure and its list disagree).
  const Tensor& saved(size_t k) const;

  // True under backward(create_graph=true) or grad(..., create_graph): the
  // gradients written must then be differentiable functions of grad and of
  // the saved tensors, so that they can be differentiated again.
  bool create_graph() const { return create_graph_; }
  // A tensor the closure saved, ready for its math: `saved` itself in a plain
  // backward; while a graph is being created, `saved` reconnected to the graph
  // (like PyTorch's SavedVariable). input(i, saved): saved holds input i's
  // values (x.detach() or a contiguous copy, x's shape; another shape is an
  // AutogradError while a graph is being created).
  Tensor input(size_t i, const Tensor& saved) const;
  // The same for a saved copy of this op's output (out.detach()): `saved`
  // itself in a plain backward, else `saved` reconnected to this node.
  Tensor output(const Tensor& saved) const;

 private:
  void accumulate(size_t i, const Tensor& g);
  Node& node_;
  std::function<void(Node*, const Tensor&)> sink_;
  bool create_graph_;
  std::vector<Tensor>* written_;  // each input's gradient, summed, for a BackwardObserver
};

// Grad mode (NoGradGuard, GradModeGuard), anomaly detection (AnomalyGuard)
// and the backward observer (BackwardObserverGuard) are settings of this
// thread: settings.h, with every other switch.

// Sees every node as run_backward runs it, on this thread (thread-local, like
// GradMode): before(node, grad) with grad = dL/d(node's output); after() once
// backward has run and released its closure (node.released, node.freed_bytes),
// with input_grads[i] what it sent to input i (undefined: nothing). For an
// AccumulateGrad node, input_grads[0] is what was added to the leaf's .grad.
// BackwardTrace (trace.h) is one; install one with BackwardObserverGuard
// (settings.h).
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  // Called just before node's backward runs; grad is dL/d(node's output).
  virtual void before(const Node& node, const Tensor& grad) = 0;
  // Called once node's backward has run and been released: input_grads[i] is
  // what it sent to input i (undefined: nothing).
  virtual void after(const Node& node, const Tensor& grad, const std::vector<Tensor>& input_grads) = 0;
};
// Called when a leaf's .grad is final for this backward (PyTorch's
// register_post_accumulate_grad_hook): once per backward (run_backward, not
// grad()), after the last contribution was added, with the leaf itself, whose
// .grad then holds the sum. Leaves the backward does not reach (no gradient
// arrives) get no call. Leaves finish in the engine's order, each once every
// op reading it has run backward: in a network, roughly the last layer's
// parameters first. A data-parallel reducer can start each bucket's allreduce from
// here while backward goes on. A hook may read and replace .grad; it runs on
// the thread calling backward.
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

// Removes its hook when it dies or at remove(); movable, not copyable.
class GradHookHandle {
 public:
  GradHookHandle() = default;
  // The hook `id` on `leaf` (made by register_post_accumulate_grad_hook).
  GradHookHandle(std::weak_ptr<TensorImpl> leaf, uint64_t id) : leaf_(std::move(leaf)), id_(id) {}
  GradHookHandle(GradHookHandle&& o) noexcept : leaf_(std::move(o.leaf_)), id_(o.id_) { o.leaf_.reset(); }
  // Removes this handle's own hook first, then takes o's.
  GradHookHandle& operator=(GradHookHandle&& o) noexcept;
  GradHookHandle(const GradHookHandle&) = delete;
  GradHookHandle& operator=(const GradHookHandle&) = delete;
  ~GradHookHandle() { remove(); }
  // Unregisters the hook (nothing if already removed or the leaf is gone).
  void remove();

 private:
  std::weak_ptr<TensorImpl> leaf_;
  uint64_t id_ = 0;
};

// Registers hook on `leaf` (a tensor that requires grad and has no grad_fn;
// else an AutogradError); keep the handle as long as the hook should run.
[[nodiscard]] GradHookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);

// Attach a Node to `out` (a fresh tensor from the op's forward, with no
// history). Does nothing when grad mode is off or no input requires grad.
// An op that keeps tensors for backward uses the overloads below. To keep its
// own output, save out.detach(): `out` itself would make a cycle (out -> Node
// -> saved -> out).
Tensor record(std::string_view op, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward);
Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward);

// record() with the tensors backward keeps, registered on the node:
//
//   return record("div", out, {a, b}, {{"b", b.detach()}, {"out", out.detach()}},
//                 [sa, sb](const Tensor& grad, Grads& dx, const Tensor& b_, const Tensor& y) { ... });
//
// backward gets the N saved tensors after (grad, dx), in the order listed;
// it captures only non-tensor values (shapes, dims, flags), so the list is
// everything it keeps. The form with a std::vector (a count known only at run
// time, as custom_op's) passes none: its backward reads them with dx.saved(k).
Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs, std::vector<SavedTensor> saved,
              BackwardFn backward);
namespace detail {
template <class F, size_t... I>
constexpr bool takes_saved(std::index_sequence<I...>) {
  return std::invocable<F&, const Tensor&, Grads&, decltype((void)I, std::declval<const Tensor&>())...>;
}
}  // namespace detail
// The form the ops use: a braced list of N saved tensors, handed to backward
// as its N extra parameters (see above).
template <size_t N, class F>
  requires(detail::takes_saved<F>(std::make_index_sequence<N>{}))
Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs, const SavedTensor (&saved)[N],
              F backward) {
  return record(op, std::move(out), inputs, std::vector<SavedTensor>(saved, saved + N),
                BackwardFn([fn = std::move(backward)](const Tensor& grad, Grads& dx) mutable {
                  [&]<size_t... I>(std::index_sequence<I...>) { fn(grad, dx, dx.saved(I)...); }(
                      std::make_index_sequence<N>{});
                }));
}

// True when any input will need a gradient (grad mode on and requires_grad).
bool any_requires_grad(std::initializer_list<Tensor> inputs);
// The same for a list known only at run time (record's vector form).
bool any_requires_grad(const std::vector<Tensor>& inputs);

// True if every element of a floating tensor is finite.
bool all_finite(const Tensor& t);

// Runs reverse mode from `root` (see Tensor::backward). create_graph records
// the backward pass itself (and implies retain_graph), so .grad can be
// differentiated again.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph, bool create_graph = false);

// Options of grad(): whether the graph is kept, whether the gradients get a
// graph of their own, and what an input the outputs do not reach gives.
struct GradOptions {
  bool retain_graph = false;  // keep the graph for another backward (create_graph implies it)
  bool create_graph = false;  // record the backward pass: the gradients have a graph of their own
  bool allow_unused = false;  // an input the outputs do not depend on: false, an AutogradError; true, an undefined gradient
};

// torch.autograd.grad: the gradients of Σ_k <outputs[k], grad_outputs[k]>
// with respect to each of `inputs` (tensors that require grad, leaves or
// not), returned in order; .grad of the leaves is not touched. Without
// grad_outputs every output must hold one element (its gradient is 1). Only
// the nodes on a path from the outputs to an input run.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, const GradOptions& options = {});

// The create_graph path of a fused op whose own backward is a kernel: rebuild
// the op from its composite twin on `inputs` (the closure's dx.input()s) and
// differentiate the twin with grad(create_graph). Writes dx[i] for every
// input that needs a gradient.
void twin_backward(Grads& dx, const Tensor& grad, const std::vector<Tensor>& inputs,
                   const std::function<Tensor(const std::vector<Tensor>&)>& twin);

}  // namespace attograd
