// The example programs' shared code (namespace attograd::app, never installed), not the library.
// Checks a training program makes at start-up, before it spends any work:
// that what it will write can be written, and that the run fits in memory.
// Each failure is one clear error (exit code 2 through cli::guarded_main)
// within the first second, instead of one after training.
#pragma once
#include <string>
#include <string_view>

#include <cxxopts.hpp>

#include "examples/common/memory_estimate.h"
#include "examples/common/trainer.h"

namespace attograd::app {

// Creates `dir` when missing, then writes and removes a small file in it.
// IOError "<what>: cannot create directory D: reason" or "<what>: cannot write in D: reason".
void check_dir_writable(const std::string& dir, std::string_view what);
// Opens `path` for appending (a file it had to create is removed again).
// IOError "<what>: cannot open P for writing: reason".
void check_file_writable(const std::string& path, std::string_view what);
// --checkpoint-dir, --log, --graph-out and --trace-backward=FILE, when given.
void check_outputs_writable(const TrainOptions& t);

// "20.5 GB available", or with the bound that applied when it is not
// MemAvailable, "4.0 GB available, ulimit -v" (memory_estimate.h).
std::string describe(const std::optional<AvailableMemory>& available);

// --force: train even when the memory estimate exceeds what is available.
void add_memory_flags(cxxopts::Options& o);
// Estimates the run's memory (memory_estimate.h) and stops with check_memory_fits
// unless --force. Returns the start-up header's part,
// "memory ~14.2 MB (20.5 GB available)" (describe).
std::string check_training_memory(const cxxopts::ParseResult& r, const TransformerConfig& c, const TrainOptions& t,
                                  int64_t src_len, int64_t tgt_len);
// The same for lm's GPT on batches of t.batch_size windows of c.context tokens.
std::string check_training_memory(const cxxopts::ParseResult& r, const GPTConfig& c, const TrainOptions& t);

}  // namespace attograd::app
