// head_probe lm-cost: what decoding a GPT (examples/lm) costs a user against
// its query heads H and K/V heads G at a fixed width: ms per token through
// the KV cache (GPT::decode_step, the step lm's sampler takes) and the
// cache's bytes, beside ms per token without a cache (the graph re-run over
// the whole window for every token) as the reference.
//
// Shape legend: B batch (rows decoded together), t decoded tokens (= the
// model's context), L layers, E = d_model, H heads, G K/V heads, D = E / H.
//   KV-cache bytes = 2·L·B·t·G·D·sizeof(float)   (K and V of every layer and position)
// With G = H that is 2·L·B·t·E·4 whatever H is; G < H divides it by H/G.
// Timing does not depend on the weights' values, so random weights serve
// unless a checkpoint is given (then its shape is the only (H, G)).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attograd::app::probe {

// What lm-cost measures (its flags).
struct LmCostOptions {
  std::vector<int64_t> heads = {1, 2, 4, 8, 16};  // H; each is timed with G = H
  std::vector<int64_t> kv_heads;                  // extra G, each at H = kv_at_heads (must divide it)
  int64_t kv_at_heads = 8;                        // the H the extra G are timed at
  std::vector<int64_t> lengths = {64, 256, 1024};  // t, each also the model's context
  int64_t d_model = 128, d_ff = 512, layers = 2, vocab = 96;  // the heads study's LM
  int64_t batch = 1;    // B
  int64_t repeats = 5;  // timed decodes per point, after one warm-up; the median is reported
  int threads = 1;      // the thread pool's size (applied by the flag parser; recorded here)
  std::string checkpoint;  // an lm checkpoint: its shape and weights instead of the grid's
  std::string out;         // the JSON file lm_cost_main writes
};

// A decode's time per token: wall (what the user waits) and the process's
// CPU time (all threads), the steadier one on a loaded machine; each the
// median over repeats of one t-token decode's time / t, in milliseconds.
struct TokenTime {
  double wall_ms = 0, cpu_ms = 0;
};

// One (H, G, t) point.
struct LmCostRow {
  int64_t heads = 0, kv_heads = 0, t = 0;
  TokenTime per_token;  // the cached decode's
  // The cache after t steps: what it holds, the formula 2·L·B·t·G·D·4, and
  // its capacity (buffers grow by doubling).
  size_t kv_bytes_used = 0, kv_bytes_formula = 0, kv_bytes_allocated = 0;
  // The most bytes tensors held at once during one t-token decode from an
  // empty cache, beyond the model's weights (the cache, the decode step's
  // packed weights and buffers), from a fresh allocator's high-water mark.
  size_t peak_bytes = 0;
};

// ms per token without a cache for one (H, G) at the shortest length t.
struct LmUncachedRow {
  int64_t heads = 0, kv_heads = 0, t = 0;
  TokenTime per_token;  // token i runs the graph over tokens 0..i
};

// Everything lm-cost measured.
struct LmCostResult {
  std::vector<LmCostRow> cached;
  std::vector<LmUncachedRow> uncached;
  std::string cpu;        // /proc/cpuinfo's model name
  double wall_s = 0;      // the whole measurement's wall time
};

// The (H, G) pairs of o, in order: (H, H) for each H, then (kv_at_heads, G)
// for each extra G not already listed. ValueError naming the flag when a G
// does not divide its H or kv_at_heads is not among the heads.
std::vector<std::pair<int64_t, int64_t>> lm_cost_grid(const LmCostOptions& o);

// Measures every point of o (lm_cost_grid, or the checkpoint's one shape).
// A cache that does not hold the formula's bytes is an Error.
LmCostResult measure_lm_cost(const LmCostOptions& o);

// The table lm-cost prints: one line per (H, G, t), then the uncached reference.
std::string lm_cost_table(const LmCostOptions& o, const LmCostResult& r);
// The JSON lm-cost writes: the options, the CPU and threads, every row.
nlohmann::json lm_cost_json(const LmCostOptions& o, const LmCostResult& r);

// The options lm-cost's flags give (argv[0] names the subcommand); nullopt
// after printing --help. ValueError "flags: --x ..." for a bad flag.
std::optional<LmCostOptions> lm_cost_options(int argc, char** argv);
// The subcommand: flags, measure_lm_cost, the table on stdout, the JSON file (--out).
int lm_cost_main(int argc, char** argv);

}  // namespace attograd::app::probe
