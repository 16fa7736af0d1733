// Parameter initialisation, PyTorch's formulas (torch.nn.init), drawn from an
// explicit Generator. Each fills t in place (not recorded by autograd).
//
// fan_in / fan_out of a weight [out, in, k...] are in·k... and out·k...
#pragma once
#include <string_view>

#include <attograd/autograd/tensor.h>

namespace attograd::init {

// A weight's fan-in and fan-out (see above).
struct Fans {
  int64_t fan_in;   // inputs feeding one output unit: in·k... of a weight [out, in, k...]
  int64_t fan_out;  // outputs one input unit feeds: out·k...
};
Fans fans(const Tensor& t);  // needs at least 2 dims

// gain for a nonlinearity: "linear"/"sigmoid" 1, "tanh" 5/3, "relu" √2,
// "leaky_relu" √(2 / (1 + a²)).
double calculate_gain(std::string_view nonlinearity, double a = 0.01);

// Fills t with U(lo, hi) draws from gen.
void uniform_(Tensor& t, double lo, double hi, Generator& gen);
// Fills t with N(mean, std²) draws from gen.
void normal_(Tensor& t, double mean, double std, Generator& gen);
// Sets every element of t to value.
void constant_(Tensor& t, double value);
// Sets t to 0 (biases, LayerNorm's bias).
void zeros_(Tensor& t);
// Sets t to 1 (LayerNorm's weight).
void ones_(Tensor& t);
// U(−b, b), b = gain · √(6 / (fan_in + fan_out))
void xavier_uniform_(Tensor& t, Generator& gen, double gain = 1.0);
// N(0, σ²), σ = gain · √(2 / (fan_in + fan_out))
void xavier_normal_(Tensor& t, Generator& gen, double gain = 1.0);
// U(−b, b), b = gain · √(3 / fan), gain = calculate_gain(nonlinearity, a)
void kaiming_uniform_(Tensor& t, Generator& gen, double a = 0.0, bool fan_in_mode = true,
                      std::string_view nonlinearity = "leaky_relu");
// N(0, σ²), σ = gain / √fan
void kaiming_normal_(Tensor& t, Generator& gen, double a = 0.0, bool fan_in_mode = true,
                     std::string_view nonlinearity = "leaky_relu");

}  // namespace attograd::init
