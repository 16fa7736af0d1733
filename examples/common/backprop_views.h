// The example programs' shared code (namespace attograd::app, never installed), not the library.
// What one training step's backward looked like, for the programs'
// --graph-out and --trace-backward (trainer.h): the step's graph as Graphviz
// DOT (and SVG when Graphviz's `dot` is on PATH), and the engine's trace.
#pragma once
#include <string>
#include <vector>

#include <attograd/autograd/graph_dot.h>
#include <attograd/autograd/trace.h>

namespace attograd::app {

struct BackpropViews {
  std::string graph_out;       // FILE.dot; "" for none
  bool graph_collapse = false;  // identical layers drawn once (to_dot's collapse_repeats)
  std::string trace_backward;  // "-": a table on stdout; else a JSON-lines file; "" for none
  bool any() const { return !graph_out.empty() || !trace_backward.empty(); }
};

// The full path of `program` found on PATH, or "" (as a shell's `command -v` would find it).
std::string find_on_path(const std::string& program);

// Writes the views of one backward that ran under `trace`: graph_out (with
// each leaf's gradient, each op's incoming gradient and freed bytes) and,
// when `dot` is on PATH, graph_out with .svg for .dot next to it; the trace as
// JSON lines. Returns the lines to show: the table (for "-") and what was
// written where. IOError naming the file when one cannot be written or `dot` fails.
std::vector<std::string> write_backprop_views(const BackpropViews& views, const Tensor& loss,
                                              const BackwardTrace& trace, const TensorNames& names);

}  // namespace attograd::app
