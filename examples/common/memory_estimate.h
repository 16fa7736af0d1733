// The example programs' shared code (namespace attograd::app, never installed), not the library.
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
//                the backward's working set, as the memory policy in force
//                saves it (memory_options(), attograd/autograd/memory.h). With N the
//                elements a layer norm keeps per row (E by default, its
//                output; 2E when it keeps its input too) and A(k) those an
//                attention keeps per query row and head over k keys (2 by
//                default, the row statistics; k with the probabilities):
//                  per source and target token  E + N (the embedding, the
//                               stack's final layer norm)
//                  encoder layer, per source token: 2N + 4E + F + H·A(S)
//                               (its two layer norms, Q K V, the merged
//                               heads; the ReLU output that the second
//                               linear also reads; the attention's part)
//                  decoder layer, per target token: 3N + 6E + F + H·(A(T) + A(S))
//                               (the same for self- and cross-attention), and
//                               2E per source token (cross-attention K, V)
//                  output       2V per target token (log-softmax, logits' gradient)
//                  backward     one more layer's worth (the gradients in flight)
//                with dropout > 0 all of it times 1.25 (the dropped copies
//                and their 1-byte masks).
// It adds every gradient to every activation, where the backward frees the
// ones as it makes the others, so it errs high: against the allocator's
// in-use peak over two AdamW steps on one thread (the test's measured_peak,
// tests/test_memory_estimate.cpp), it is 1.12-1.40x for models of E 32-256,
// 1-3 layers and batches of 16-64 rows of 16-64 tokens under the default
// policy, 1.15-1.50x under "fast"; never below 1x in these.
// Not counted: the program and its libraries (peak RSS 23 MB for a model of
// a few kB), the data set, the evaluation pass (no gradients, so far less
// than a training step), and the blocks the caching allocator keeps when batch
// shapes vary (attograd/autograd/backend/allocator.h: at most the in-use peak plus 64 MiB).
// Against peak RSS less those 23 MB (copy_task, 1 thread, 3 steps, batches of
// one shape): 1.03x (0.24M parameters, E 64, 32 rows of 24 tokens) and 1.05x
// (5.5M parameters, E 256, 3+3 layers, 64 rows of 42 tokens), 1.10x for the
// latter with ATTOGRAD_MEMORY=fast; 0.58x with lengths 5-48, whose changing
// shapes the cache keeps (docs/reliability.md, "Checks before work is spent").
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <attograd/nn/gpt.h>
#include <attograd/nn/transformer.h>

namespace attograd::app {

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
// activations, in elements, per token (B·T of them), N and A(k) as above:
//   embeddings   2E (the sum and its dropout input)
//   per block    2N + 9E + F + H·A(T) (LN1's input and LN2's; Q K V, the
//                merged heads, the projection and the residual sum; the MLP's
//                hidden layer, its output and the residual sum; the attention's part)
//   final        E + N (LNf) and 3V (logits, log-softmax, their gradient)
// with dropout > 0 all of it times 1.25, as above. The backward frees the
// forward's as it goes, so no more is added for it. Against the allocator's
// in-use peak as above: 1.12-1.24x (E 64-256, 2-4 layers, B·T 512-1024,
// V 100-1000) under the default policy, 1.10-1.18x under "fast". Against peak
// RSS less lm's 34 MB without a model (1 thread, 3 steps): 1.03x (E 128,
// 4 layers, B·T 4096). The evaluation pass, in batches of the same size, adds
// up to about 0.2x in the caching allocator (see above).
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

}  // namespace attograd::app
