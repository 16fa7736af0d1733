// The seq2seq programs' task for the shared loop (trainer.h): batches of a
// DataLoader, cross-entropy over the target tokens, and held-out evaluation
// with teacher-forced loss, token accuracy and greedy exact match.
//
// Shape legend: B batch, S source length, T target length, V target vocab.
#include <cmath>

#include <fmt/format.h>

#include <attograd/autograd/engine.h>
#include <attograd/autograd/ops/loss.h>
#include <attograd/autograd/ops/reduction.h>
#include <attograd/data/dataset.h>
#include "examples/common/trainer.h"

namespace attograd::app {

// ---- evaluation -------------------------------------------------------------------------------

EvalResult evaluate(Seq2SeqTransformer& model, const Dataset& data, const EvalOptions& opt, int64_t pad_id) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalResult r;
  LoaderOptions lo;
  lo.batch_size = opt.batch_size;
  lo.shuffle = false;
  lo.pad_id = pad_id;
  DataLoader loader(data, lo);
  double loss_sum = 0;
  int64_t tokens = 0, correct_tokens = 0, exact = 0;
  for (const Batch& full : loader.epoch_batches()) {
    if (r.examples >= opt.max_examples) break;
    // The last batch may reach past max_examples: only its first `rows` sentences count, in the loss too.
    const int64_t rows = std::min<int64_t>(full.src.size(0), opt.max_examples - r.examples);
    const auto first_rows = [rows](const Tensor& t) { return t.defined() ? t.narrow(0, 0, rows) : t; };
    const Tensor src = first_rows(full.src), src_pad = first_rows(full.src_key_padding_mask);
    const Tensor tgt_out = first_rows(full.tgt_out);
    const int64_t V = model.config.tgt_vocab;
    // The target's padding mask matters only to a decoder without the causal mask (TransformerConfig::causal_decoder):
    // a causal row never reaches the padding after its sentence.
    Tensor logits = model.forward(src, first_rows(full.tgt_in), src_pad, first_rows(full.tgt_key_padding_mask));  // [rows, T, V]
    CrossEntropyOptions ce;
    ce.ignore_index = pad_id;
    ce.reduction = Reduction::sum;
    loss_sum += cross_entropy(logits.reshape({-1, V}), tgt_out.reshape({-1}), ce).item();
    const auto pred = argmax(logits, -1).to_vector<int64_t>();
    const auto gold = tgt_out.to_vector<int64_t>();
    for (size_t i = 0; i < gold.size(); ++i)
      if (gold[i] != pad_id) {
        ++tokens;
        correct_tokens += pred[i] == gold[i];
      }
    std::vector<Example> examples;
    int64_t longest = 0;
    for (int64_t k = 0; k < rows; ++k) {
      examples.push_back(data.get(full.indices[static_cast<size_t>(k)]));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(examples.back().tgt.size()));
    }
    std::vector<Hypothesis> hyps;
    if (opt.decode) {
      DecodeOptions d;
      d.max_len = opt.max_decode_len > 0 ? opt.max_decode_len : std::min(longest + 8, model.config.max_len - 1);
      d.use_decode_step = opt.use_decode_step;
      if (opt.beam > 1) hyps = beam_search(model, src, src_pad, d, {opt.beam, opt.length_penalty});
      else hyps = greedy_decode(model, src, src_pad, d);
    }
    for (size_t i = 0; i < examples.size(); ++i, ++r.examples) {
      r.sources.push_back(examples[i].src);
      r.references.push_back(examples[i].tgt);
      if (opt.decode) {
        r.outputs.push_back(hyps[i].tokens);
        exact += hyps[i].tokens == examples[i].tgt;
      }
    }
  }
  r.tokens = tokens;
  r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
  r.token_accuracy = tokens ? static_cast<double>(correct_tokens) / static_cast<double>(tokens) : 0.0;
  r.exact_match = r.examples ? static_cast<double>(exact) / static_cast<double>(r.examples) : 0.0;
  model.train(was_training);
  return r;
}

namespace {

std::string eval_line(const EvalResult& e) {
  std::string s = fmt::format("loss {:.4f}  token acc {:.2f}%  exact match {:.2f}% ({} held-out)", e.loss,
                              100 * e.token_accuracy, 100 * e.exact_match, e.examples);
  for (auto& [k, v] : e.extra) s += fmt::format("  {} {:.2f}", k, v);
  return s;
}

nlohmann::json eval_record(const EvalResult& e) {
  nlohmann::json j = {{"eval_loss", e.loss}, {"token_accuracy", e.token_accuracy}, {"exact_match", e.exact_match}};
  for (auto& [k, v] : e.extra) j[k] = v;
  return j;
}

// Examples [first, first + size) of another dataset: this rank's part of the held-out set.
class SliceDataset : public Dataset {
 public:
  SliceDataset(const Dataset& data, int64_t first, int64_t size) : data_(data), first_(first), size_(size) {}
  int64_t size() const override { return size_; }
  Example get(int64_t i) const override {
    if (i < 0 || i >= size_) fail<IndexError>("SliceDataset", "index {} out of range [0, {})", i, size_);
    return data_.get(first_ + i);
  }

 private:
  const Dataset& data_;
  int64_t first_, size_;
};

// Rows [first, last) of a batch, padded as the whole batch was.
Batch rows_of(const Batch& b, int64_t first, int64_t last, int64_t pad_id) {
  Batch s;
  const int64_t n = last - first;
  s.src = b.src.narrow(0, first, n);
  s.tgt_in = b.tgt_in.narrow(0, first, n);
  s.tgt_out = b.tgt_out.narrow(0, first, n);
  s.src_key_padding_mask = b.src_key_padding_mask.narrow(0, first, n);
  s.tgt_key_padding_mask = b.tgt_key_padding_mask.narrow(0, first, n);
  s.causal_mask = b.causal_mask;
  s.indices.assign(b.indices.begin() + first, b.indices.begin() + last);
  for (int64_t id : s.tgt_out.to_vector<int64_t>()) s.num_tokens += id != pad_id;
  return s;
}

// Every rank's evaluation of its share merged, in rank order, on every rank:
// the sums behind the means are added, the decoded sequences concatenated.
EvalResult merge_across_ranks(dist::Communicator& comm, const EvalResult& mine) {
  const double tokens = static_cast<double>(mine.tokens), examples = static_cast<double>(mine.examples);
  std::vector<double> sums{mine.loss * tokens, std::round(mine.token_accuracy * tokens),
                           std::round(mine.exact_match * examples), tokens, examples};
  comm.allreduce_sum(std::span<double>(sums));
  EvalResult all;
  all.tokens = static_cast<int64_t>(sums[3]);
  all.examples = static_cast<int64_t>(sums[4]);
  all.loss = sums[3] > 0 ? sums[0] / sums[3] : 0.0;
  all.token_accuracy = sums[3] > 0 ? sums[1] / sums[3] : 0.0;
  all.exact_match = sums[4] > 0 ? sums[2] / sums[4] : 0.0;
  const nlohmann::json seqs = {mine.sources, mine.outputs, mine.references};
  for (const std::string& bytes : comm.allgather_bytes(seqs.dump())) {
    const nlohmann::json theirs = nlohmann::json::parse(bytes);
    for (auto [field, part] : {std::pair{&all.sources, 0}, {&all.outputs, 1}, {&all.references, 2}}) {
      auto more = theirs[part].get<std::vector<std::vector<int64_t>>>();
      field->insert(field->end(), more.begin(), more.end());
    }
  }
  return all;
}

LoaderOptions global_batches(const LoaderOptions& per_rank, int ranks) {
  LoaderOptions o = per_rank;
  o.batch_size *= ranks;
  o.max_tokens *= ranks;
  return o;
}

// In a world of N ranks, loader_ yields global batches and each rank trains
// on its rows of each.
class Seq2SeqTask : public TrainTask {
 public:
  Seq2SeqTask(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
              const Dataset& heldout, const TaskHooks& hooks)
      : model_(model),
        dropout_gen_(std::move(dropout_gen)),
        train_(train),
        heldout_(heldout),
        hooks_(hooks),
        comm_(dist::world()),
        global_(comm_.size() > 1 ? std::make_optional<DataLoader>(train.dataset(),
                                                                   global_batches(train.options(), comm_.size()))
                                 : std::nullopt),
        loader_(global_ ? *global_ : train) {}

  Module& model() override { return model_; }
  int64_t model_width() const override { return model_.config.d_model; }
  int64_t batch_size() const override { return train_.options().batch_size; }
  Generator& dropout_generator() override { return *dropout_gen_; }
  const EvalResult& last_eval() const { return last_eval_; }

  CheckpointMeta checkpoint_meta() const override {
    CheckpointMeta meta;
    meta.config = model_.config.to_json();
    meta.task = hooks_.task;
    if (hooks_.src_vocab) meta.vocab_src = hooks_.src_vocab->tokens();
    if (hooks_.tgt_vocab) meta.vocab_tgt = hooks_.tgt_vocab->tokens();
    return meta;
  }
  nlohmann::json reparsed_config(const nlohmann::json& saved) const override {
    return TransformerConfig::from_json(saved).to_json();
  }

  ShardLoss next_loss(double label_smoothing) override {
    const Batch global = loader_.next();
    const auto [first, last] = share_of(global.size(), comm_.rank(), comm_.size());
    const Batch b = comm_.size() > 1 ? rows_of(global, first, last, train_.options().pad_id) : global;
    ShardLoss out;
    out.global_tokens = global.num_tokens;
    if (b.size() == 0) return out;
    Tensor logits = model_.forward(b.src, b.tgt_in, b.src_key_padding_mask, b.tgt_key_padding_mask);  // [B, T, V]
    CrossEntropyOptions ce;
    ce.ignore_index = train_.options().pad_id;
    ce.label_smoothing = label_smoothing;
    const bool whole = b.num_tokens == global.num_tokens;
    if (!whole) ce.reduction = Reduction::sum;
    Tensor loss = cross_entropy(logits.reshape({-1, model_.config.tgt_vocab}), b.tgt_out.reshape({-1}), ce);
    if (!whole) loss = loss * (1.0 / static_cast<double>(global.num_tokens));
    out.loss = loss;
    return out;
  }

  TaskEval evaluate(int64_t max_examples) override {
    const int64_t n = std::min(max_examples, heldout_.size());
    const auto [first, last] = share_of(n, comm_.rank(), comm_.size());
    const SliceDataset mine(heldout_, first, last - first);
    EvalOptions eo;
    eo.max_examples = last - first;
    EvalResult e = mine.size() > 0 ? app::evaluate(model_, mine, eo, train_.options().pad_id) : EvalResult{};
    if (comm_.size() > 1) e = merge_across_ranks(comm_, e);
    if (hooks_.add_metrics) hooks_.add_metrics(e);
    last_eval_ = e;
    return {e.loss, eval_line(e), eval_record(e)};
  }

  void save_data_position(TrainProgress& p) const override {
    p.loader = loader_.state();
    p.global_batch = loader_.options().batch_size;
    if (loader_.options().max_tokens > 0) p.global_max_tokens = loader_.options().max_tokens;
  }

  // A checkpoint made with another global batch (another number of processes
  // or --batch-size) continues at the first batch holding an example not yet
  // trained on, so no example is skipped and fewer than a batch are seen twice.
  std::optional<std::string> restore_data_position(const TrainProgress& p) override {
    LoaderState state = p.loader;
    std::optional<std::string> note;
    const int64_t batch = loader_.options().batch_size, max_tokens = loader_.options().max_tokens;
    // Token batches are cut from the budget, so another budget makes other batches: a position means nothing there.
    if (p.global_max_tokens.value_or(0) != max_tokens)
      fail<ValueError>("resume", "the checkpoint's batches held {} tokens over all processes, now {}; hint: resume "
                       "with the same --max-tokens and number of processes",
                       p.global_max_tokens ? fmt::format("at most {}", *p.global_max_tokens) : std::string("no budget of"),
                       max_tokens > 0 ? fmt::format("at most {}", max_tokens) : std::string("--batch-size rows"));
    if (max_tokens == 0 && p.global_batch && *p.global_batch != batch) {
      const int64_t seen = std::min(state.position * *p.global_batch, loader_.dataset().size());
      state.position = seen == loader_.dataset().size() ? loader_.batches_per_epoch() : seen / batch;
      note = fmt::format("the checkpoint's global batch was {}, now {}: continuing at batch {} of epoch {}",
                         *p.global_batch, batch, state.position, state.epoch);
    }
    loader_.set_state(state);
    return note;
  }

 private:
  Seq2SeqTransformer& model_;
  std::shared_ptr<Generator> dropout_gen_;
  DataLoader& train_;
  const Dataset& heldout_;
  const TaskHooks& hooks_;
  dist::Communicator& comm_;
  std::optional<DataLoader> global_;  // with N > 1 ranks: N * train_'s batch size, over its dataset
  DataLoader& loader_;                // the global batches: *global_, or train_ itself on one rank
  EvalResult last_eval_;
};

}  // namespace

std::unique_ptr<TrainTask> seq2seq_task(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen,
                                        DataLoader& train, const Dataset& heldout, const TaskHooks& hooks) {
  return std::make_unique<Seq2SeqTask>(model, std::move(dropout_gen), train, heldout, hooks);
}

TrainSummary train_seq2seq(Seq2SeqTransformer& model, std::shared_ptr<Generator> dropout_gen, DataLoader& train,
                           const Dataset& heldout, const TrainOptions& opt, const TaskHooks& hooks) {
  Seq2SeqTask task(model, std::move(dropout_gen), train, heldout, hooks);
  TrainSummary s;
  static_cast<RunSummary&>(s) = app::train(task, opt);
  s.last_eval = task.last_eval();
  return s;
}

}  // namespace attograd::app
