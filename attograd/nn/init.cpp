#include <attograd/nn/init.h>

#include <cmath>

namespace attograd::init {

Fans fans(const Tensor& t) {
  if (t.dim() < 2)
    fail<ShapeError>("init", "fan in/out need a tensor with at least 2 dims, got {}", shape_str(t.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(std::string_view nl, double a) {
  if (nl == "linear" || nl == "sigmoid" || nl == "identity") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + a * a));
  fail<ValueError>("calculate_gain", "unknown nonlinearity '{}'; hint: linear, sigmoid, tanh, relu, leaky_relu", nl);
}

void uniform_(Tensor& t, double lo, double hi, Generator& gen) { t.copy_(Tensor::uniform(t.shape(), lo, hi, gen, t.dtype())); }
void normal_(Tensor& t, double mean, double std, Generator& gen) { t.copy_(Tensor::normal(t.shape(), mean, std, gen, t.dtype())); }
void constant_(Tensor& t, double value) { t.fill_(value); }
void zeros_(Tensor& t) { t.fill_(0.0); }
void ones_(Tensor& t) { t.fill_(1.0); }

void xavier_uniform_(Tensor& t, Generator& gen, double gain) {
  const auto [in, out] = fans(t);
  const double b = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  uniform_(t, -b, b, gen);
}

void xavier_normal_(Tensor& t, Generator& gen, double gain) {
  const auto [in, out] = fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)), gen);
}

void kaiming_uniform_(Tensor& t, Generator& gen, double a, bool fan_in_mode, std::string_view nl) {
  const auto [in, out] = fans(t);
  const double fan = static_cast<double>(fan_in_mode ? in : out);
  const double b = calculate_gain(nl, a) * std::sqrt(3.0 / fan);
  uniform_(t, -b, b, gen);
}

void kaiming_normal_(Tensor& t, Generator& gen, double a, bool fan_in_mode, std::string_view nl) {
  const auto [in, out] = fans(t);
  const double fan = static_cast<double>(fan_in_mode ? in : out);
  normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(fan), gen);
}

}  // namespace attograd::init
