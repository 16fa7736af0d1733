// The model target: a checkpoint's model file loaded the way the programs
// load one, then used. What parses is built with the programs' own code
// (examples/common/checkpoint_model.h) into both model families, a GPT (lm)
// and a Seq2SeqTransformer (copy_task, translate, heads_study), since any
// checkpoint can be handed to any program; a model that builds runs one
// forward on a tiny input (batch 1, two tokens). Bad content must end in an
// attograd::Error (IOError, ValueError, ShapeError, ...): a crash, a
// sanitizer report, std::bad_alloc or a hang is a finding. So is a broken
// promise about accepted content: every tensor's bytes lie inside the file,
// and the logits have the shape the config gives.
//
// Unlike fuzz/targets.h's loaders this links nn/ and the engine, so only the
// fuzz_model program and tests/test_fuzz_regressions.cpp include it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include <attograd/autograd/engine.h>
#include "examples/common/checkpoint_model.h"
#include "targets.h"

namespace attograd::fuzz {

// The target's own bound on the weights a file holds and on the position
// table its config asks for, checked before anything is built: it keeps every
// input fast (a 2M-parameter model builds, loads and runs in well under a
// second under ASan).
inline constexpr int64_t kMaxModelElements = 2'000'000;

// ids [1, n]: 0, 1, ... below vocab.
inline Tensor tiny_ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(i % vocab);
  return Tensor::from_vector(ids, {1, n});
}

// A model file as load_checkpoint reads one (IOError when malformed), its
// tensors inside the file.
inline app::Checkpoint model_checkpoint(std::string_view bytes) {
  SafetensorsData d = parse_safetensors(bytes, "fuzz");
  require_inside(d, bytes.size());
  app::Checkpoint c;
  c.meta = app::parse_checkpoint_meta(d.metadata, "fuzz");
  c.model = std::move(d.tensors);
  return c;
}

// The elements the file's tensors hold.
inline int64_t held_elements(const app::Checkpoint& c) {
  int64_t n = 0;
  for (const auto& [name, t] : c.model) n += t.numel();
  return n;
}

// Within the target's bound: the file holds at most kMaxModelElements and the
// position table the config asks for is no larger. The bound is on what the
// file holds, not on the config's parameter count, so a config that lies
// about its sizes still reaches the programs' own check (checkpoint_model.h).
inline bool within_bound(const app::Checkpoint& c, int64_t table_elements) {
  return held_elements(c) <= kMaxModelElements && table_elements <= kMaxModelElements;
}

// Builds c's model as a GPT and runs it; false when it is over the target's
// bound (nothing built). An Error when the file does not hold a GPT.
inline bool use_gpt(const app::Checkpoint& c) {
  const GPTConfig cfg = GPTConfig::from_json(c.meta.config);
  if (!within_bound(c, cfg.context * cfg.d_model)) return false;
  const auto model = gpt_from_checkpoint(c);
  const int64_t n = std::min<int64_t>(2, cfg.context);
  NoGradGuard no_grad;
  const Tensor logits = model->forward(tiny_ids(n, cfg.vocab));
  require(logits.shape() == Shape{1, n, cfg.vocab}, "GPT logits are [1, T, vocab]");
  return true;
}

// The same for a Seq2SeqTransformer.
inline bool use_seq2seq(const app::Checkpoint& c) {
  const TransformerConfig cfg = TransformerConfig::from_json(c.meta.config);
  if (!within_bound(c, cfg.max_len * cfg.d_model)) return false;
  const auto model = seq2seq_from_checkpoint(c);
  const int64_t n = std::min<int64_t>(2, cfg.max_len);
  NoGradGuard no_grad;
  const Tensor logits = model->forward(tiny_ids(n, cfg.src_vocab), tiny_ids(n, cfg.tgt_vocab));
  require(logits.shape() == Shape{1, n, cfg.tgt_vocab}, "Seq2SeqTransformer logits are [1, T, tgt_vocab]");
  return true;
}

inline void model(std::string_view bytes) {
  app::Checkpoint c;
  try {
    c = model_checkpoint(bytes);
  } catch (const IOError&) {
    return;
  }
  try {
    use_gpt(c);
  } catch (const Error&) {
  }
  try {
    use_seq2seq(c);
  } catch (const Error&) {
  }
}

}  // namespace attograd::fuzz
