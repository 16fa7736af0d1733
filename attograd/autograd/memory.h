// What the fused ops keep for backward: one process-wide setting that trades
// memory for time (docs/performance.md, "Memory", has the measurements).
//
//   attention   probabilities: P [B, H, T, S], the softmax weights;
//               row_stats (default): two numbers per score row [B, H, T, 2],
//               the row's max and 1 / Σ exp(score − max), from which backward
//               recomputes P bit for bit (one more GEMM per head, T·S exps)
//   layer_norm  input: x [R, E];
//               output (default): y [R, E], which the next op (a Linear)
//               keeps anyway, and backward recovers x̂ = (y − bias) / weight
//               (within a few ulps); a call whose weight could not give x̂
//               back well (a zero weight, or |bias| > 16·|weight| anywhere)
//               keeps x instead
//
// Both choices give the same gradients as the other setting (attention bit
// for bit; layer norm to float rounding) and change no forward value.
// Set it in code (set_memory_options, or MemoryOptionsGuard for a scope:
// settings.h, with every other switch) or with the environment variable
// ATTOGRAD_MEMORY, read at the first use:
//   ATTOGRAD_MEMORY=lean          the defaults (row_stats, output)
//   ATTOGRAD_MEMORY=fast          probabilities, input (the choices before this setting)
//   ATTOGRAD_MEMORY=attention=probabilities,layer_norm=output   one by one
// It applies to ops recorded after it is set; a recorded node keeps what it
// saved. Set it while no other thread runs ops.
#pragma once
#include <string>
#include <string_view>

namespace attograd {

// What the fused attention keeps for backward (see above).
enum class AttentionSaves {
  probabilities,  // P [B, H, T, S]
  row_stats,      // each score row's max and 1 / Σ exp(score − max), [B, H, T, 2]
};
// What the fused layer norm keeps for backward (see above).
enum class LayerNormSaves {
  input,   // x
  output,  // y (x where y cannot give x̂ back)
};

// The setting (see above); the defaults are the lean choices.
struct MemoryOptions {
  AttentionSaves attention = AttentionSaves::row_stats;  // what scaled_dot_product_attention keeps
  LayerNormSaves layer_norm = LayerNormSaves::output;    // what layer_norm keeps
  // Field by field.
  bool operator==(const MemoryOptions&) const = default;
};

// The setting in force (ATTOGRAD_MEMORY at the first call, else the defaults).
MemoryOptions memory_options();
// Replaces the setting for ops recorded from now on.
void set_memory_options(const MemoryOptions& options);

// "lean", "fast", or comma-separated attention=probabilities|row_stats and
// layer_norm=input|output (unnamed ones keep their defaults); anything else
// is a ValueError naming the bad part.
MemoryOptions parse_memory_options(std::string_view spec);
// The spec parse_memory_options reads back: "attention=row_stats,layer_norm=output".
std::string memory_options_str(const MemoryOptions& options);

}  // namespace attograd
