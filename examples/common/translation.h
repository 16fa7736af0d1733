// The number-translation task (English number words -> fr/de/es) as the
// programs share it: translate trains and serves it, heads_study trains it
// many times. Corpus splits come from data/numbers/*.tsv (data/parallel.h).
//
// Shape legend: ids are token sequences without BOS/EOS.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/data/parallel.h>
#include "examples/common/trainer.h"

namespace attograd {

struct TranslationTask {
  std::string lang;           // target language: fr, de or es
  std::string src_tokenizer;  // "hyphen"
  std::string tgt_tokenizer;  // "hyphen" (fr, es) or "char" (de)

  static TranslationTask for_language(const std::string& lang);  // ValueError for an unknown language
  nlohmann::json to_json() const;                                 // the checkpoint's task record
  static TranslationTask from_json(const nlohmann::json& j, const std::string& file);  // IOError when malformed
};

// The number corpus beside the running program, <program's dir>/../share/attograd/numbers:
// data/numbers through a link from the build tree (build/bin/translate), the installed
// copy under an install prefix (bin/attograd-translate, share/attograd/numbers). Never
// the current directory; --data overrides it.
std::string default_corpus_dir();

// A split of the corpus: a name in data_dir (train, valid, test, gen) or a path to a TSV file.
// Read with read_file_bytes' bound text_input_limit() (memory_estimate.h).
// Its English sources are normalised as translate normalises its input
// (normalize_number_words, data/number_words.h), so training, eval and
// translate read the same text.
ParallelText read_split(const std::string& data_dir, const std::string& split, const std::string& lang);

// Everything the modes share once the vocabularies are known.
struct Translator {
  TranslationTask task;
  Vocab src_vocab, tgt_vocab;
  std::unique_ptr<Tokenizer> src_tok, tgt_tok;

  Translator(TranslationTask t, Vocab src, Vocab tgt);
  // Vocabularies built from the training split's sentences.
  static Translator from_training_text(const TranslationTask& t, const ParallelText& train);

  VectorDataset encode(const ParallelText& text) const;
  // One input line (line_number counts from 1, for messages) as the model
  // reads it: normalised, split, mapped to ids. `unknown` receives the words
  // read as <unk>. ValueError when the line has no words, or none the model
  // knows (then the model would only guess); the line is shown escaped
  // (fmt's "{:?}": control characters, bidi overrides and NUL as \x1b, \u202e, \x00).
  std::vector<int64_t> encode_input(std::string_view line, int64_t line_number, std::vector<std::string>& unknown) const;
  std::string show_target(const std::vector<int64_t>& ids) const;
  std::string show_source(const std::vector<int64_t>& ids) const;
  // BLEU over target tokens (words for fr/es, characters for de) and chrF on the joined text.
  void add_metrics(EvalResult& e) const;
  TaskHooks hooks() const;
};

// A trained model with its task and vocabularies, from a checkpoint directory
// or .model.safetensors file (IOError when it is missing, corrupt or not a
// translate checkpoint).
struct TrainedTranslator {
  std::unique_ptr<Seq2SeqTransformer> model;  // in eval mode
  Translator tr;
};
TrainedTranslator load_translator(const std::string& checkpoint);

// Longest source or target (tokens) over the datasets: the model's max_len must exceed it by 2 (BOS/EOS).
int64_t longest_sequence(const std::vector<const VectorDataset*>& sets);

// "loss 0.0123  token accuracy 99.10%  exact match 97.30%  BLEU 98.12  chrF 99.01"
std::string metrics_line(const EvalResult& e);

}  // namespace attograd
