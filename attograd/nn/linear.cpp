#include <attograd/nn/linear.h>

#include <algorithm>
#include <cmath>

#include <attograd/autograd/backend/blas.h>
#include <attograd/autograd/ops/matmul.h>
#include <attograd/nn/inference.h>
#include <attograd/nn/init.h>

namespace attograd {

Linear::Linear(int64_t in, int64_t out, Generator& gen, bool with_bias, DType dtype)
    : UnaryModule("Linear"), in_features(in), out_features(out) {
  if (in <= 0 || out <= 0) fail<ValueError>("Linear", "features must be positive, got in={} out={}", in, out);
  Tensor w = Tensor::empty({out, in}, dtype);
  init::kaiming_uniform_(w, gen, std::sqrt(5.0));
  weight = register_parameter("weight", w);
  if (with_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    Tensor b = Tensor::empty({out}, dtype);
    init::uniform_(b, -bound, bound, gen);
    bias = register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

// The GEMM layer picks W or Wᵀ (gemm_weight): on OpenBLAS the graph's W, so
// there the bits stay the graph's.
template <class T>
void Linear::forward_rows(T* out, const T* x, int64_t rows, const StepLinear& w) {
  const int64_t O = w.w.size(0);
  const T beta = w.b.defined() ? T(1) : T(0);
  if (w.b.defined()) {
    const T* pb = w.b.data<T>();
    for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + O, out + r * O);
  }
  gemm_weight<T>(out, x, w.w, rows, T(1), beta);
}

template void Linear::forward_rows<float>(float*, const float*, int64_t, const StepLinear&);
template void Linear::forward_rows<double>(double*, const double*, int64_t, const StepLinear&);

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

}  // namespace attograd
