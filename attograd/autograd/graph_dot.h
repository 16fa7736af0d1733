// to_dot: the graph behind a tensor as Graphviz DOT text (render it with
// `dot -Tsvg graph.dot -o graph.svg`).
//
//   std::string dot = to_dot(loss, {.names = model.parameter_names(), .grads = true});
//
// One vertex per recorded op (ellipse: op name, output shape, dtype), one per
// leaf that requires grad (blue box: its name from `names` if it has one, else
// "leaf"; shape, dtype) and, with `constants`, one per input that needs no
// gradient (dashed box: "no grad", shape, dtype). With `saved_tensors`, an
// op's vertex lists what its backward keeps until it runs (the tensors its
// record() registered): "saved x [4, 3] f32 48 B (input 0)", where the
// parenthesis names what else holds that storage, and a line
// "saved total 80 B, own 32 B" (own: the bytes only this node keeps alive).
// A released node (backward ran without retain_graph) has none left. Edges point the way data
// flows, from inputs to the op that reads them; the tensor's own op has a bold
// border. Vertices are numbered n0, n1, ... in the order the forward made them.
//
// Collapsing (collapse_repeats, needs `names`): a parameter name with a number
// in it ("encoder.layers.3.linear1.weight") puts the op that reads it in block
// ("encoder.layers", 3); an op that reads no named parameter joins the block
// of its latest-made input (a residual add joins the block whose output it
// adds), and ops after a named parameter outside any block are outside. Blocks
// of one prefix with consecutive numbers and the same structure (the same ops,
// shapes, relative parameter names and edges inside the block) are drawn once,
// as a cluster labelled with the count; edges from one copy to the next become
// one dashed "repeat" edge, and edges from outside are drawn into the copy shown.
#pragma once
#include <string>

#include <attograd/autograd/trace.h>

namespace attograd {

// What to_dot() draws (see above). collapse_repeats without `names` makes
// to_dot throw a ValueError.
struct DotOptions {
  TensorNames names;                     // leaf names, e.g. Module::parameter_names()
  bool constants = true;                 // draw the inputs that need no gradient
  bool grads = false;                    // each leaf's .grad (shape, L2 norm); with `trace`, each op's incoming gradient too
  bool saved_bytes = false;              // each op's freed bytes: its saved tensors, known once backward released it
  bool saved_tensors = false;            // each op's saved tensors (record's list): name, shape, dtype, bytes, total
  const BackwardTrace* trace = nullptr;  // a trace of a backward through this graph
  bool collapse_repeats = false;        // draw repeated numbered blocks (layers) once, as a cluster with a count; needs `names`
};

// root must require grad (an AutogradError otherwise).
std::string to_dot(const Tensor& root, const DotOptions& options = {});

}  // namespace attograd
