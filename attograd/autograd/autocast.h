// Mixed precision on the CPU: what runs in bfloat16 while bf16 autocast is
// on (AutocastGuard, settings.h), after PyTorch's
// torch.autocast("cpu", dtype=torch.bfloat16), for the ops a transformer's
// time goes to.
//
//   op                  under bf16 autocast                            backward keeps
//   ------------------  ---------------------------------------------  -----------------------------
//   linear, matmul      f32 operands rounded to bf16 (to nearest       the bf16 copies, half the
//                       even), every product summed in f32, f32 out    bytes; linear keeps its
//                                                                      weight itself (rounded again)
//   their backward      grad rounded to bf16, the same mixed products,
//                       f32 gradients (so the f32 weights' .grad is f32)
//   fused attention     Q, K, V rounded; per head S = scale·QKᵀ in f32,    the bf16 copies of Q, K, V
//                       softmax in f32, P rounded for P·V; backward
//                       rounds dO, P and scale·dS where they enter a
//                       product
//   gelu                f32 as without autocast                        x rounded to bf16 (half the
//                                                                      bytes of the MLP's widest
//                                                                      activation)
//   everything else     f32 as without autocast: softmax, layer norm, the loss, reductions, the
//                       optimizer and its master weights
//   f64 operands        untouched (gradcheck runs in f64 under any guard)
//
// A product of two bf16 values is exact in f32, so a mixed product differs
// from the f32 one only by the rounding of its operands (8 significant bits:
// a relative error up to 2^-9 each) and the order of the f32 sums. Which
// kernel runs it: gemm.h's bf16_gemm_kernel().
//
// Where this differs from torch.autocast on the CPU (torch 1.13, checked:
// docs/design/bf16.md section 7): torch returns a product's output in bf16,
// so what follows it (GELU, dropout, the attention softmax's output) runs and
// is kept in bf16 until an add with an f32 tensor promotes it back; here
// every output is f32, so only the products' operands are rounded, at the
// cost of keeping the other activations in f32 (torch kept 0.62x of its f32
// bytes on a tiny LM). torch rounds a weight's gradient to bf16 before
// widening it (and sums the gradients of a weight used twice in bf16); here
// weight gradients come straight from the f32 sums.
//
// The op decides in its forward, from the mode of the thread that runs it,
// and its backward closure keeps the decision (PyTorch's autocast is a
// forward-time dispatch too). While a graph is being created
// (create_graph), a backward formula runs under the forward's precision, on
// the saved bf16 copies widened to f32 (or the inputs themselves where the
// graph reaches them), so its products round as the forward's did.
//
// Decoding with a KV cache (nn/attention.cpp's step) is not autocast: run
// generation outside the guard, as the programs do.
#pragma once
#include <attograd/autograd/dtype.h>
#include <attograd/autograd/tensor.h>

namespace attograd {

// Whether an op's matrix product of operands of dtype d runs in bf16 now:
// bf16 autocast is on on this thread and d is f32.
bool autocast_to_bf16(DType d);

// t (f32) rounded to bf16 as PyTorch rounds (bfloat16.h), in a new tensor of
// t's shape: in t's layout when t is dense (contiguous, or a permutation of
// it such as attention's split-heads views), else contiguous; no graph. The
// conversion runs on the pool.
Tensor bf16_rounded(const Tensor& t);

}  // namespace attograd
