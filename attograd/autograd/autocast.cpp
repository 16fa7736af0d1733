// AutocastMode (settings.h) and the helpers of autocast.h.
#include <attograd/autograd/autocast.h>

#include <algorithm>
#include <vector>

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

namespace {

// Whether t's elements fill one block of numel() values with no gaps or
// repeats, in some order of its dims (contiguous, or a permutation of it, as
// attention's split-heads views): then t.data() is the block's start.
bool dense(const Tensor& t) {
  std::vector<int64_t> dims(static_cast<size_t>(t.dim()));
  for (int64_t i = 0; i < t.dim(); ++i) dims[i] = i;
  std::stable_sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  int64_t expected = 1;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (t.size(*it) == 1) continue;
    if (t.strides()[*it] != expected) return false;
    expected *= t.size(*it);
  }
  return true;
}

}  // namespace

Tensor bf16_rounded(const Tensor& t) {
  if (t.dtype() != DType::f32)
    fail<DTypeError>("autocast", "rounds f32 tensors to bf16, got {} {}; hint: f64 is never autocast",
                     dtype_name(t.dtype()), shape_str(t.shape()));
  // A dense t keeps its layout: one linear pass, and the products address the copy in place as they would
  // t (the gradients of attention's split-heads inputs then keep that layout too). Any other t (broadcast,
  // with gaps) is made contiguous first.
  const bool keep_layout = dense(t);
  const Tensor src = keep_layout ? t.detach() : t.detach().contiguous();
  const Tensor block = Tensor::empty({src.numel()}, DType::bf16);
  const float* x = src.data<float>();
  BFloat16* y = block.data<BFloat16>();
  parallel_for(src.numel(), kElementwiseGrain, [=](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) y[i] = BFloat16(x[i]);
  });
  return make_view(block, t.shape(), keep_layout ? t.strides() : contiguous_strides(t.shape()), 0);
}

}  // namespace attograd
