// The heads study's experiments 1-3 (docs/heads-study.md): learning curves
// and converged quality per H, the two axes of H (constant E: D = E/H, and
// constant D: E = H·D) against parameters, FLOPs and measured step time, and
// the composition split (gen.tsv) against H. Every mean carries a 95%
// percentile-bootstrap interval over seeds (stats.h).
//
// Shape legend: E model width, H heads, D = E/H head width, F feed-forward width.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "examples/heads_study/study.h"

namespace attograd::app::heads {

// Trains as train_seq2seq does and records the learning curve: the
// teacher-forced loss and token accuracy on the first curve_size valid
// sentences before training, every opt.eval_every steps and at the end.
RunSummary train_with_curve(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
                            const Corpus& corpus, const TrainOptions& opt, int64_t curve_size,
                            std::vector<CurveSample>& curve);

// Teacher-forced loss and token accuracy, greedy exact match and BLEU on the
// first n sentences of a split.
EvalResult score_split(Seq2SeqTransformer& model, const Translator& tr, const VectorDataset& data, int64_t n);
double bleu_of(const EvalResult& e);  // its "bleu" extra metric (0 when absent)

// One model shape of the study: a point on the constant-E axis (E = d_model
// of the options, F = d_ff), the constant-D axis (D = head_width, E = H·D,
// F = 4E), or both.
struct GridConfig {
  std::string lang;
  int64_t heads = 0, d_model = 0, d_ff = 0;
  bool constant_e = false, constant_d = false;
};
// Every shape of the study, each once, language by language.
std::vector<GridConfig> study_grid(const StudyOptions& o);
// The options that train `c` (o with its model width and feed-forward width).
StudyOptions options_for(const StudyOptions& o, const GridConfig& c);

// The training step time of one shape: o.timing_steps steps timed in each of
// o.timing_rounds rounds. Rounds visit the shapes in a rotated order (round r
// starts at shape r), so a slow spell of the machine falls on different
// shapes in different rounds; the median is reported. 1 thread.
struct StepTiming {
  GridConfig config;
  std::vector<double> ms;  // ms per step, one per round
  double median_ms = 0;
};
std::vector<StepTiming> interleaved_step_times(const StudyOptions& o, const std::vector<GridConfig>& grid,
                                               const std::vector<const Corpus*>& corpora);

// The compute the grid will take: Σ steps × median step time per language,
// in core-minutes (training steps at 1 thread; evaluation not counted).
std::string planned_compute(const StudyOptions& o, const std::vector<StepTiming>& timing);

// Finished runs are kept in <out>/runs/, one JSON file per shape and seed
// with the options that decide its result, so a later invocation reuses them
// instead of training again. That is how the grid uses two cores:
// `--part 1/2` and `--part 2/2` train alternate runs in two processes at
// once, and a last invocation without --part trains what is missing (always
// the inspected models, which are not kept) and writes the reports.
std::optional<RunResult> load_run(const StudyOptions& o, const GridConfig& c, uint64_t seed);  // none if absent or stale
void save_run(const StudyOptions& o, const RunResult& r);
// Whether run `index` (grid order, inspected runs not counted) belongs to part `part` of `parts` (1-based).
inline bool in_part(int64_t index, int64_t part, int64_t parts) { return index % parts == part - 1; }

// The reports of experiments 1-3 from every run of both axes:
//   curves-<lang>.jsonl   one line per run: its shape, seed and learning curve
//   curves-<lang>.md      per H: final quality and steps to 90%/99% valid token
//                         accuracy with 95% CIs, paired differences between neighbouring H
//   axes.md, axes.jsonl   both axes: quality against parameters, FLOPs and step time; the critical H per budget
//   composition.md        exact match on gen against test per H, paired
void write_curve_reports(const StudyOptions& o, const std::vector<RunResult>& runs,
                         const std::vector<StepTiming>& timing);

}  // namespace attograd::app::heads
