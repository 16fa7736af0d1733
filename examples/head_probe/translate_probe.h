// head_probe translate: what every head of a trained translation model
// (examples/translate) does and costs, per attention type: encoder
// self-attention, decoder self-attention and decoder cross-attention. The
// pruning curves remove one type's heads at a time, the other types kept
// (Michel, Levy & Neubig 2019, Fig. 4), and all heads together. Built on the
// heads study's tools (examples/heads_study/head_stats.h) with teacher-forced
// cross-entropy (no label smoothing) as their LossBatches.
//
// Shape legend: B sentences per batch, S source length (+ <eos>), T target
// length (+ <bos>/<eos>), padded to the batch's longest.
//   AblationBatch src [B, S], tgt_in / tgt_out [B, T] i64; paddings [B, S], [B, T] b8
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/data/dataset.h>
#include <attograd/nn/transformer.h>
#include "examples/common/translation.h"
#include "examples/heads_study/head_stats.h"

namespace attograd::app::probe {

// The three kinds of attention module of a Seq2SeqTransformer.
enum class AttentionType { encoder_self, decoder_self, decoder_cross };
// The JSON names: "encoder_self", "decoder_self", "decoder_cross".
const char* attention_type_name(AttentionType t);
// The type of an attention module by its name (attention_modules): encoder.*
// is encoder self-attention, *cross_attn decoder cross-attention, the rest
// decoder self-attention.
AttentionType attention_type_of(const std::string& module);

// The first n examples of data (all when n is 0 or more than there are), in
// dataset order, in batches of `batch` as evaluate (examples/common/trainer.h)
// reads them: padded with kPadId, <bos>/<eos> added.
std::vector<heads::AblationBatch> first_batches(const Dataset& data, int64_t n, int64_t batch);

// The split of a translate checkpoint's own corpus as `translate eval --split`
// reads it: numbers from data_dir (empty: default_corpus_dir()); a text task's
// corpus as the checkpoint names it (gettext catalogs under locale_dir, or a
// directory) and cut as in training, refused when its training part is not the
// checkpoint's (CRC-32). split is valid or test.
ParallelText checkpoint_split(const TranslationTask& task, const std::string& split, const std::string& data_dir,
                              const std::string& locale_dir);

struct TranslateProbeOptions {
  int64_t random_orders = 5;  // seeded random removal orders beside the three ranked ones
  // Global random order r draws from Generator(mix_seed(seed, r)), type i's
  // (0-based) from Generator(mix_seed(mix_seed(seed, i + 1), r)).
  uint64_t seed = 1;
};

// The analyses of head_probe translate on the model and batches, as JSON:
//   baseline_loss (mean cross-entropy per target token), tokens, types (the
//   three names), importance ("once, full model"), importance_batches;
//   heads: one object per head in attention_modules order: type, layer (within
//     its type), head, module, importance, importance_normalized (ℓ2 per
//     module), ablation_loss, ablation_delta, the attention statistics
//     (HeadStat's: entropy, uniform_entropy, mean_distance, max_weight,
//     previous_token, self, first_position, induction and induction_chance for
//     decoder self-attention, rows) and, for cross-attention, last_source and
//     diagonal;
//   pruning: {masks_evaluated, by_type: {<type>: P}, global: P}, each P as
//     head_probe lm's pruning: {fractions, removed (k per fraction), heads (n),
//     orders: [{name, heads in removal order, loss per k}]} with orders
//     importance, importance_normalized, ablation, random-1..K (least important
//     first); a type's heads are [layer, head], the global ones [type, layer, head];
//   seconds: the time of each part.
nlohmann::json probe_translate(Seq2SeqTransformer& model, const std::vector<heads::AblationBatch>& batches,
                               const TranslateProbeOptions& o);

// The subcommand: flags, checkpoint and split, probe_translate, the JSON file.
int translate_main(int argc, char** argv);

}  // namespace attograd::app::probe
