// What the model configs (GPTConfig, TransformerConfig) share when they check
// a config before anything is built: every size field in a range, integer
// JSON fields that are integers, and parameter counts computed from the
// config alone with checked arithmetic (attograd/autograd/tensor.h's checked_mul), so a
// config read from someone else's file can be refused, or its memory
// estimated, before one weight is allocated.
//
// Shape legend: E model width, F feed-forward width, G·D the K/V width.
#pragma once
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attograd::config_sizes {

// The limits of a model config's size fields: far beyond any model this
// library trains, small enough that no product of two fields (vocab × width,
// layers × F × E) can overflow int64.

// The largest vocabulary.
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
// The largest model width E.
inline constexpr int64_t kMaxWidth = int64_t{1} << 16;
// The largest feed-forward width F.
inline constexpr int64_t kMaxFFWidth = int64_t{1} << 20;
// The longest sequence a model takes (GPT's context, the seq2seq max_len).
inline constexpr int64_t kMaxLength = int64_t{1} << 20;
// The most layers (blocks) of one stack.
inline constexpr int64_t kMaxLayers = int64_t{1} << 10;

// ValueError "<config>: <name> must be in [lo, hi], got v".
void check_range(std::string_view config, std::string_view name, int64_t v, int64_t lo, int64_t hi);
// j[key] as an integer: a missing key, or a value that is not an integer
// (16.5, "16", true), is a ValueError naming config and key.
int64_t json_int(const nlohmann::json& j, const char* key, std::string_view config);

// Parameter counts of the parts the models are made of (checked: ShapeError on overflow).
int64_t linear_params(int64_t in, int64_t out, bool bias);               // weight [out, in], bias [out]
int64_t layer_norm_params(int64_t e);                                     // weight and bias [E]
int64_t attention_params(int64_t e, int64_t kv);                          // q, out: E -> E; k, v: E -> G·D; biases
int64_t feed_forward_params(int64_t e, int64_t f);                        // E -> F -> E with biases
// Sums counts with checked arithmetic; `what` names the config in the error.
int64_t sum_params(std::initializer_list<int64_t> parts, std::string_view what);

}  // namespace attograd::config_sizes
