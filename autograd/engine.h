// The reverse-mode engine (engine.cpp): the graph, record() that builds it
// during the forward pass, run_backward() that walks it, and the grad and
// anomaly modes. Every differentiable op makes one Node: the op's name, an
// edge to the Node that produced each input, and the backward closure written
// right under the op's forward. See docs/autograd.md for the walk-through.
//
// The engine sits on tensor.h (and the kernels under it) only; the ops sit on
// the engine. Gradients are summed with add_ / add_values (tensor.h).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd {

class Grads;
// backward(grad, dx): grad is dL/d(out) with out's shape; write dL/d(input i)
// with `dx[i] += ...` for every i where dx.needs(i).
using BackwardFn = std::function<void(const Tensor& grad, Grads& dx)>;

struct Node {
  std::string name;                         // "mul", "matmul", "AccumulateGrad", ...
  std::vector<std::shared_ptr<Node>> next;  // producer of input i; null: input needs no grad
  std::vector<Shape> input_shapes;          // for the check where gradients meet
  std::vector<DType> input_dtypes;
  BackwardFn backward;                      // freed after use unless retain_graph
  bool released = false;
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
  class Slot {
   public:
    Slot(Grads& g, size_t i) : g_(g), i_(i) {}
    void operator+=(const Tensor& g) { g_.accumulate(i_, g); }
   private:
    Grads& g_;
    size_t i_;
  };
  Grads(Node& node, std::function<void(Node*, const Tensor&)> sink)
      : node_(node), sink_(std::move(sink)) {}
  bool needs(size_t i) const { return i < node_.next.size() && node_.next[i] != nullptr; }
  Slot operator[](size_t i) { return Slot(*this, i); }
  const Node& node() const { return node_; }

 private:
  void accumulate(size_t i, const Tensor& g);
  Node& node_;
  std::function<void(Node*, const Tensor&)> sink_;
};

// Gradient recording is on by default; NoGradGuard turns it off in a scope
// (thread-local), like torch.no_grad().
struct GradMode {
  static bool enabled();
  static void set_enabled(bool on);
};
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};

// Anomaly detection (torch.autograd.detect_anomaly): while a guard lives, every
// recorded op checks its forward output (for NaN and +Inf; -Inf is how masks
// enter a softmax), and every backward checks each gradient it produces (for
// any non-finite value); the first one throws an AutogradError naming the op
// and its input shapes.
struct AnomalyMode {
  static bool enabled();
  static void set_enabled(bool on);
};
class AnomalyGuard {
 public:
  AnomalyGuard() : prev_(AnomalyMode::enabled()) { AnomalyMode::set_enabled(true); }
  ~AnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;
 private:
  bool prev_;
};

// Attach a Node to `out` (a fresh tensor from the op's forward, with no
// history). Does nothing when grad mode is off or no input requires grad.
// To save an op's own output for backward, capture out.detach(): capturing
// `out` itself would make a cycle (out -> Node -> closure -> out).
Tensor record(std::string_view op, Tensor out, std::initializer_list<Tensor> inputs,
              BackwardFn backward);
Tensor record(std::string_view op, Tensor out, const std::vector<Tensor>& inputs,
              BackwardFn backward);

// True when any input will need a gradient (grad mode on and requires_grad).
bool any_requires_grad(std::initializer_list<Tensor> inputs);

// True if every element of a floating tensor is finite.
bool all_finite(const Tensor& t);

// Runs reverse mode from `root` (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace attograd
