// AutocastMode (settings.h) and the helpers of autocast.h.
#include <attograd/autograd/autocast.h>

#include <attograd/autograd/backend/threads.h>
#include <attograd/autograd/error.h>
#include <attograd/autograd/settings.h>

namespace attograd {

namespace {
thread_local Precision t_autocast = Precision::f32;
}  // namespace

Precision AutocastMode::get() { return t_autocast; }
void AutocastMode::set(Precision precision) { t_autocast = precision; }

bool autocast_to_bf16(DType d) { return d == DType::f32 && t_autocast == Precision::bf16; }

Tensor bf16_rounded(const Tensor& t) {
  if (t.dtype() != DType::f32)
    fail<DTypeError>("autocast", "rounds f32 tensors to bf16, got {} {}; hint: f64 is never autocast",
                     dtype_name(t.dtype()), shape_str(t.shape()));
  const Tensor src = t.detach().contiguous();
  Tensor out = Tensor::empty(t.shape(), DType::bf16);
  const float* x = src.data<float>();
  BFloat16* y = out.data<BFloat16>();
  parallel_for(src.numel(), kElementwiseGrain, [=](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) y[i] = BFloat16(x[i]);
  });
  return out;
}

}  // namespace attograd
