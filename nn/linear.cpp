#include <attograd/nn/linear.h>

#include <cmath>

#include <attograd/autograd/ops/matmul.h>
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

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, bias.defined());
}

}  // namespace attograd
