// BackwardTrace: a log of one backward pass, node by node, in the order the
// engine runs them. While the guard lives, every run_backward on this thread
// is recorded (it is a BackwardObserver, engine.h):
//
//   BackwardTrace trace({.names = model.parameter_names()});
//   loss.backward();
//   fmt::print("{}", trace.table());   // or trace.write_jsonl(out)
//
// One row per node: the step (0 is the loss's own node), the op, the
// gradient that arrived (dL/d its output: shape and L2 norm), what it sent to
// each input (shape and norm; "-" where an input needs no gradient), the time
// its backward took, the bytes the allocator got back when the engine
// released its closure (the saved tensors nothing else holds), and the bytes
// of all the tensors its record() saved. AccumulateGrad
// rows are the leaves: `name` is the parameter's name when `names` has it.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <unordered_map>
#include <vector>

#include <attograd/autograd/engine.h>

namespace attograd {

// Names for tensors by identity (Tensor::id()), e.g. a module's parameters:
// Module::parameter_names() makes one from named_parameters().
using TensorNames = std::unordered_map<const void*, std::string>;

// The name of the leaf an AccumulateGrad node adds into, if `names` has it.
std::string leaf_name(const Node& node, const TensorNames& names);

// A gradient as a trace shows it: shape and L2 norm (defined false: none).
struct GradInfo {
  bool defined = false;  // false: no gradient (an undefined tensor); shape is then empty and norm 0
  Shape shape;           // the gradient's shape
  double norm = 0;  // L2 norm over all elements, in double
};
// g's shape and L2 norm, summed in double (0 for an integer tensor); an
// undefined g gives defined = false.
GradInfo grad_info(const Tensor& g);

// One node of a BackwardTrace, as before() and after() filled it (see above).
struct TraceRow {
  int64_t step = 0;             // 0, 1, ...: the order the engine ran the nodes
  std::string op;               // Node::name
  std::string name;             // the leaf's name (AccumulateGrad rows), else ""
  GradInfo grad;                // dL/d(output), as it arrived
  std::vector<GradInfo> input_grads;  // what went to each input
  double micros = 0;            // the node's backward (or the leaf's accumulation)
  size_t freed_bytes = 0;       // Node::freed_bytes after the release
  size_t saved_bytes = 0;       // the bytes of the tensors its record() saved (all, shared or not), before it ran
  const Node* node = nullptr;   // identity only (to_dot matches rows to nodes); do not dereference
};

// How a BackwardTrace labels its rows: `names` names the leaves' AccumulateGrad rows.
struct TraceOptions {
  TensorNames names;  // leaf names by Tensor::id() for the rows' `name`; empty: rows stay unnamed
};

// Records every backward on this thread while it lives (see above).
class BackwardTrace : public BackwardObserver {
 public:
  // Starts recording: this trace is the thread's BackwardObserver until it dies.
  explicit BackwardTrace(TraceOptions options = {});
  // Neither copied nor moved: the engine holds the trace by address.
  BackwardTrace(const BackwardTrace&) = delete;
  BackwardTrace& operator=(const BackwardTrace&) = delete;

  // The rows so far, one per node, in the order the engine ran them.
  const std::vector<TraceRow>& rows() const { return rows_; }
  // Fixed-width columns: step, op, grad in, grads out, time, freed, saved.
  std::string table() const;
  // One JSON object per row: {"step":0,"op":"sum","name":"","grad":{"shape":[],"norm":1.0},
  // "input_grads":[{"shape":[2,3],"norm":2.44},null],"us":1.5,"freed_bytes":0,"saved_bytes":0}
  void write_jsonl(std::ostream& out) const;

  // Opens the node's row: step, op, leaf name and the gradient that arrived.
  void before(const Node& node, const Tensor& grad) override;
  // Completes the row before() opened: time, freed bytes, the gradients sent on.
  void after(const Node& node, const Tensor& grad, const std::vector<Tensor>& input_grads) override;

 private:
  TraceOptions options_;
  std::vector<TraceRow> rows_;
  // The rows whose node is running, innermost last, with their start times: a
  // backward can run inside another (create_graph's composite twins call
  // grad() from a node's closure), so after() completes the row before() opened.
  std::vector<std::pair<size_t, int64_t>> open_;
  BackwardObserverGuard guard_;  // last: installed once the rest is ready
};

}  // namespace attograd
