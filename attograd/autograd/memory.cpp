#include <attograd/autograd/memory.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include <attograd/autograd/error.h>

namespace attograd {

namespace {

constexpr std::string_view kEnv = "ATTOGRAD_MEMORY";

constexpr std::array<std::pair<AttentionSaves, std::string_view>, 2> kAttentionNames = {{
    {AttentionSaves::probabilities, "probabilities"},
    {AttentionSaves::row_stats, "row_stats"},
}};
constexpr std::array<std::pair<LayerNormSaves, std::string_view>, 2> kLayerNormNames = {{
    {LayerNormSaves::input, "input"},
    {LayerNormSaves::output, "output"},
}};

template <class E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& names, E e) {
  for (const auto& [v, name] : names)
    if (v == e) return name;
  return "?";
}

template <class E, size_t N>
E value_of(const std::array<std::pair<E, std::string_view>, N>& names, std::string_view key, std::string_view value) {
  for (const auto& [v, name] : names)
    if (name == value) return v;
  fail<ValueError>(kEnv, "unknown {} choice '{}'; hint: {}={} or {}", key, value, key, names[0].second,
                   names[1].second);
}

std::atomic<AttentionSaves> g_attention{MemoryOptions{}.attention};
std::atomic<LayerNormSaves> g_layer_norm{MemoryOptions{}.layer_norm};

// ATTOGRAD_MEMORY, once, before the options are first read or set.
void read_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* spec = std::getenv(std::string(kEnv).c_str())) {
      const MemoryOptions o = parse_memory_options(spec);
      g_attention = o.attention;
      g_layer_norm = o.layer_norm;
    }
  });
}

}  // namespace

MemoryOptions memory_options() {
  read_env();
  return {g_attention.load(), g_layer_norm.load()};
}

void set_memory_options(const MemoryOptions& options) {
  read_env();
  g_attention = options.attention;
  g_layer_norm = options.layer_norm;
}

MemoryOptions parse_memory_options(std::string_view spec) {
  if (spec == "lean") return {};
  if (spec == "fast") return {AttentionSaves::probabilities, LayerNormSaves::input};
  MemoryOptions o;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq), value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    if (key == "attention") o.attention = value_of(kAttentionNames, key, value);
    else if (key == "layer_norm") o.layer_norm = value_of(kLayerNormNames, key, value);
    else
      fail<ValueError>(kEnv, "cannot read '{}'; hint: lean, fast, or attention=probabilities|row_stats,"
                       "layer_norm=input|output", item);
  }
  return o;
}

std::string memory_options_str(const MemoryOptions& options) {
  return fmt::format("attention={},layer_norm={}", name_of(kAttentionNames, options.attention),
                     name_of(kLayerNormNames, options.layer_norm));
}

}  // namespace attograd
