// How much memory a training run of the Seq2SeqTransformer needs, estimated
// from its config before anything is allocated, so a run that cannot fit
// stops at start-up instead of thrashing the machine.
//
// Shape legend: B batch, S source length, T target length (each with its
// BOS/EOS), E = d_model, F = d_ff, H heads, V vocab sizes, L layers.
//
// Everything is float32 (4 bytes an element):
//   weights      P = the parameter count (TransformerConfig::parameter_count), plus
//                the sinusoidal position table max_len·E (a buffer)
//   gradients    P
//   optimizer    k·P, k the parameter-sized buffers it keeps (AdamW and Adam
//                2: the moments; SGD with momentum 1; train_choices.h)
//   activations  what autograd saves in one forward for the backward, plus
//                the backward's working set. Elements:
//                  per source and target token  3E (the embedding, the stack's
//                               final LayerNorm input and output)
//                  encoder layer, per source token: 8E + F + H·S (LayerNorm
//                               inputs and outputs, Q K V, the merged heads;
//                               the ReLU output that the second linear also
//                               reads; the softmax weights P [B, H, S, S])
//                  decoder layer, per target token: 12E + F + H·(T + S)
//                               (the same for self- and cross-attention), and
//                               2E per source token (cross-attention K, V)
//                  output       2V per target token (log-softmax, logits' gradient)
//                  backward     one more layer's worth (the gradients in flight)
//                with dropout > 0 all of it times 1.25 (the dropped copies
//                and their 1-byte masks).
// Not counted: the program and its libraries (peak RSS 9.5 MB for a model of
// a few kB), the data set, the evaluation pass (no gradients, so far less
// than a training step), and the blocks the caching allocator keeps when batch
// shapes vary (autograd/backend/allocator.h: at most the in-use peak plus 64 MiB).
// Measured against peak RSS less those 9.5 MB, the estimate is 1.03-1.06x for
// copy_task models of 0.2M to 15M parameters with batches of one shape, 0.63x
// with lengths 5-48 (docs/reliability.md, "Checks before work is spent").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>

namespace attograd {

struct MemoryEstimate {
  int64_t parameters = 0;
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;  // bytes
  double total() const { return weights + gradients + optimizer + activations; }
  // "14.2 MB (weights 0.9 MB, gradients 0.9 MB, optimizer 1.9 MB, activations 10.5 MB)"
  std::string summary() const;
};


// A training step on batches of `batch` sequences of at most src_len / tgt_len
// tokens, with an optimizer that keeps `optimizer_buffers` buffers per parameter.
MemoryEstimate estimate_training_memory(const TransformerConfig& c, int64_t batch, int64_t src_len, int64_t tgt_len,
                                        int optimizer_buffers = 2);

// lm's GPT, trained on batches of `batch` windows of c.context tokens.
// Weights, gradients and optimizer state as above (P = c.parameter_count(),
// plus the sinusoidal table context·E when positions are not learned);
// activations, in elements, per token (B·T of them):
//   embeddings   2E (the sum and its dropout input)
//   per block    11E + F + 2H (LN1 input and output, Q K V, the merged heads,
//                the projection and the residual sum; LN2's output, the MLP's
//                hidden layer, its output and the residual sum; the attention
//                keeps two row statistics per head, not its weights)
//   final        2E (LNf input and output) and 3V (logits, log-softmax, their gradient)
// with dropout > 0 all of it times 1.25, as above. The backward frees the
// forward's as it goes, so no more is added for it. Measured (1 thread, 3
// steps, --eval-size 1) against peak RSS less lm's 24 MB without a model: the
// estimate is 0.91x (E 64, 2 layers, B·T 512), 0.99x (E 128, 4 layers,
// B·T 4096), 1.00x (E 256, 4 layers, B·T 4096), 1.04x (E 96, 3 layers, V 1000)
// and 1.18x with dropout 0.1. The evaluation pass, in batches of the same
// size, adds up to about 0.2x in the caching allocator (see above).
MemoryEstimate estimate_training_memory(const GPTConfig& c, int64_t batch, int optimizer_buffers = 2);

// What this process may still allocate, in bytes: the least of MemAvailable
// (/proc/meminfo), its cgroup's limit less the cgroup's usage (v2 memory.max,
// v1 memory.limit_in_bytes, over the process's cgroup and its ancestors) and
// the address-space limit (RLIMIT_AS, ulimit -v) less the address space in
// use. `bound` names the one that applied: "MemAvailable", "cgroup memory
// limit" or "ulimit -v". nullopt where none can be read.
struct AvailableMemory {
  double bytes = 0;
  std::string bound;
};
std::optional<AvailableMemory> available_memory();
std::optional<double> memory_available();  // available_memory()'s bytes

// ValueError "memory: this run needs about 137.5 GB (...), but 20.5 GB is
// available (MemAvailable); hint: ..." when the estimate exceeds `available`,
// unless `force`. Nothing when `available` is unknown. `bound` is
// AvailableMemory::bound.
void check_memory_fits(const MemoryEstimate& e, std::optional<double> available, bool force,
                       std::string_view bound = "MemAvailable");

std::string format_bytes(double bytes);  // "512 B", "14.2 MB", "137.5 GB", "7.7 TB"

// The most bytes a program reads from one text input (lm --text, translate
// --input and corpora), read_file_bytes' bound: an eighth of `available` (a
// text beside its 4-byte token ids takes about 5 times its size), at least
// 64 MiB, and kReadFileLimit when `available` is unknown or larger.
uint64_t text_input_limit(std::optional<double> available);
uint64_t text_input_limit();  // with memory_available()

}  // namespace attograd
