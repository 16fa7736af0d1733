// Dropout: forward, then the backward closure right under it.
//
// Shape legend: x [*] any shape; keep [*] b8 (the saved mask); out, grad, dx [*].
//
// Higher-order gradients: the backward applies the same mask and scale to
// grad, through the same recorded op, so it is differentiable to any order.
#include <attograd/autograd/ops/dropout.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/map_zip.h>

namespace attograd {

namespace {
// masked_scale: out = keep ? x · scale : 0, dropout with a given mask
Tensor masked_scale(const Tensor& x, const Tensor& keep, double scale) {
  Tensor out = dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    const T s = static_cast<T>(scale);
    return zip<T>("dropout", x, keep, [s](T v, bool k) { return k ? v * s : T(0); });
  });
  return record("dropout", out, {x}, {{"keep", keep}}, [scale](const Tensor& grad, Grads& dx, const Tensor& keep_) {
    // out = keep ? x · scale : 0  =>  dx = keep ? grad · scale : 0
    dx[0] += masked_scale(grad, keep_, scale);
  });
}
}  // namespace

// dropout: out = keep ? x · scale : 0,  scale = 1 / (1 − p)  (0 when p == 1)
Tensor dropout(const Tensor& x, double p, bool train, Generator& gen) {
  if (!(p >= 0 && p <= 1))
    fail<ValueError>("dropout", "p must be a probability in [0, 1], got {} (input {})", p, shape_str(x.shape()));
  if (!train || p == 0) return x;
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  Tensor keep = Tensor::empty(x.shape(), DType::b8);  // [*]
  bool* pk = keep.data<bool>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) pk[i] = gen.uniform() >= p;
  return masked_scale(x, keep, scale);
}

}  // namespace attograd
