// Losses: cross-entropy (fused log-softmax + NLL), NLL and mean squared error.
//
// Shape legend: V classes (vocab); the class dim is LAST. logits [*, V] go with
// targets [*] (i64): [N, V] with [N], or [B, T, V] with [B, T], which is read
// as N = B·T rows (PyTorch's F.cross_entropy(logits.view(-1, V), targets.view(-1))).
// Note that PyTorch's own multi-dim layout puts the class dim second; ours
// does not.
//
// Semantics follow PyTorch, with one choice of ours: when every target is
// ignore_index, reduction mean gives 0 with a zero gradient (PyTorch: NaN).
#pragma once
#include <attograd/autograd/tensor.h>

namespace attograd {

// How a loss reduces its per-row values: mean, sum, or none (the rows' shape).
enum class Reduction { mean, sum, none };

// cross_entropy's options, as F.cross_entropy's arguments.
struct CrossEntropyOptions {
  int64_t ignore_index = -100;   // rows with this target add nothing and are not counted
  double label_smoothing = 0.0;  // ε in [0, 1]
  Reduction reduction = Reduction::mean;  // mean over non-ignored rows (0 if none), sum, or none: loss per row [*]
};

// cross_entropy: logits [*, V], targets [*] i64 -> loss [] (mean, sum) or [*] (none)
//   per row: loss = (1 − ε)·(−logp[t]) + ε·mean_v(−logp[v]),  logp = log_softmax(logits)
//   mean divides by the number of rows whose target is not ignore_index.
// A target outside [0, V) that is not ignore_index is an IndexError.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// The same loss composed from primitives (log_softmax, one-hot masks, sum);
// the reference that tests hold the fused op to.
Tensor cross_entropy_composite(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// nll_loss's options, as F.nll_loss's arguments.
struct NllLossOptions {
  int64_t ignore_index = -100;            // rows with this target add nothing and are not counted
  Reduction reduction = Reduction::mean;  // mean over non-ignored rows (0 if none), sum, or none: loss per row [*]
};

// nll_loss: logp [*, V] (log-probabilities), targets [*] i64 -> loss [] or [*]
//   per row: loss = −logp[t]; same ignore/mean rules as cross_entropy.
Tensor nll_loss(const Tensor& logp, const Tensor& targets, const NllLossOptions& options = {});

// mse_loss: a [*], b [*] (same shape, no broadcasting) -> loss [] or [*]
//   loss = (a − b)², reduced by mean or sum.
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);

}  // namespace attograd
