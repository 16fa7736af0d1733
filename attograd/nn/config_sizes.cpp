#include <attograd/nn/config_sizes.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/tensor.h>

namespace attograd::config_sizes {

namespace {
constexpr std::string_view kOp = "parameter count";
}  // namespace

void check_range(std::string_view config, std::string_view name, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    fail<ValueError>(config, "{} must be in [{}, {}], got {}; hint: the config is corrupt, or far larger than this "
                     "library supports", name, lo, hi, v);
}

int64_t json_int(const nlohmann::json& j, const char* key, std::string_view config) {
  const auto it = j.find(key);
  if (it == j.end()) fail<ValueError>(config, "bad config JSON: key '{}' not found", key);
  if (!it->is_number_integer())
    fail<ValueError>(config, "bad config JSON: '{}' is {}, expected an integer", key, it->dump());
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail<ValueError>(config, "bad config JSON: '{}' is {}, past int64", key, it->dump());
  return it->get<int64_t>();
}

int64_t linear_params(int64_t in, int64_t out, bool bias) {
  return checked_add(checked_mul(in, out, kOp, "a Linear weight"), bias ? out : 0, kOp, "a Linear layer");
}

int64_t layer_norm_params(int64_t e) { return checked_mul(2, e, kOp, "a LayerNorm"); }

int64_t attention_params(int64_t e, int64_t kv) {
  const int64_t q_or_out = linear_params(e, e, true), k_or_v = linear_params(e, kv, true);
  return sum_params({q_or_out, k_or_v, k_or_v, q_or_out}, "an attention layer");
}

int64_t feed_forward_params(int64_t e, int64_t f) {
  return checked_add(linear_params(e, f, true), linear_params(f, e, true), kOp, "a feed-forward layer");
}

int64_t sum_params(std::initializer_list<int64_t> parts, std::string_view what) {
  int64_t n = 0;
  for (int64_t p : parts) n = checked_add(n, p, kOp, what);
  return n;
}

}  // namespace attograd::config_sizes
