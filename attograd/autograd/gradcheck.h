// gradcheck: compare an op's analytic gradients with central finite
// differences, as torch.autograd.gradcheck does. A public API: use it to
// check your own layers and custom ops.
//
//   auto report = gradcheck([](const std::vector<Tensor>& in) { return my_op(in[0], in[1]); },
//                           {x, w});          // float64 inputs, requires_grad set
//   if (!report.ok) fmt::print("{}\n", report.summary());
//
// For every input i that requires grad, and every output element k:
//   analytic  J[k][j] = (dL/dx_i)[j] after backward with grad = one-hot(k)
//   numeric   J[k][j] = (f(x + eps e_j)[k] - f(x - eps e_j)[k]) / (2 eps)
// The analytic Jacobian takes one backward per output element through one
// kept graph; the numeric one perturbs one element of input i at a time (the
// others unchanged) and reads the outputs as float64.
// Inputs that are leaves requiring grad are used as they are (pass a module's
// parameters to check them; their .grad is cleared); other inputs are replaced
// by detached leaves over the same storage. An input whose elements overlap in
// memory (a stride of 0, as from expand) is refused with a ValueError.
// An element passes when |analytic - numeric| <= atol + rtol |numeric| and
// neither is NaN; each input's report names its worst element, the one
// furthest past (or closest to) that bound.
// It also checks that backward is deterministic (two runs agree exactly) and
// linear in the output gradient (grad · 2 gives twice the input gradient).
//
// gradgradcheck checks second derivatives, as torch.autograd.gradgradcheck:
//
//   auto report = gradgradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {x});
//
// With a random output gradient u and a random v_i per checked input (from a
// Generator seeded with `seed`), it runs gradcheck on the scalar
//   h(x) = Σ_i <grad(f(x), x_i, u), v_i>
// whose gradient is the Hessian-vector product: analytically by grad(...,
// create_graph = true) and a backward through that graph, numerically by
// central differences of h (each h a first-order gradient). The report
// (summary "gradgradcheck ...") names each input's worst element of ∂h/∂x_i;
// the output element is always 0 (h is a scalar). It also checks that the
// first-order gradient with create_graph equals the plain backward's (many
// ops take another path while a graph is being created).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <attograd/autograd/tensor.h>

namespace attograd {

// Tolerances and checks of gradcheck(); eps is the finite-difference step.
struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step added to and taken from each input element
  double atol = 1e-5;  // absolute tolerance: an element passes if |analytical - numerical| <= atol + rtol·|numerical|
  double rtol = 1e-3;  // relative tolerance, scaled by |numerical| (see atol)
  bool raise_on_failure = false;   // throw GradcheckError instead of returning ok=false
  bool allow_float32 = true;       // false: refuse non-float64 inputs; true: warn in the report
  bool check_determinism = true;   // compute each Jacobian row twice; the backward must repeat bit for bit
  bool check_linearity = true;     // check that backward of 2·grad_output gives twice the input grads
};

// gradcheck's findings for one input.
struct InputReport {
  size_t input = 0;           // index into the inputs
  bool checked = false;       // false when the input does not require grad
  bool ok = true;             // every element within tolerance and no NaN (true when not checked)
  double max_abs_err = 0;     // largest |analytical - numerical| over the Jacobian
  double max_rel_err = 0;     // over the elements whose abs err exceeds atol
  // The worst element: output element, input element (flat and as an index).
  int64_t worst_output = -1, worst_input = -1;  // worst_input: flat input element, -1 if none
  std::vector<int64_t> worst_input_index;  // worst_input as an index into the input's shape
  // numerical: the worst element's central-difference derivative.
  double numerical = 0, analytical = 0;  // analytical: backward's derivative at the same element
};

// gradcheck's result: ok, one report per input, and readable lines.
struct GradcheckReport {
  std::string check = "gradcheck";  // or "gradgradcheck"
  bool ok = true;                   // false if any check (Jacobian, determinism, linearity) failed
  std::vector<InputReport> inputs;  // one per input, in the order given
  std::vector<std::string> warnings;  // e.g. non-float64 inputs
  std::vector<std::string> failures;  // one line per failed check
  std::string summary() const;        // a readable multi-line report
};

class GradcheckError : public Error { using Error::Error; };

// The function under test: inputs -> one output tensor.
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks fn's analytic gradients against finite differences for every input
// that requires grad (see above); the report says what failed and where. With
// options.raise_on_failure a failure throws GradcheckError instead.
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// Checks fn's second derivatives by gradcheck on h (see above), u and the v_i
// drawn from a Generator seeded with `seed`. An output that is not a defined
// floating tensor is a ValueError; with options.raise_on_failure a failure
// throws GradcheckError.
GradcheckReport gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {}, uint64_t seed = 0x5eed);

}  // namespace attograd
