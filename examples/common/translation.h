// The example programs' shared code (namespace attograd::app, never installed), not the library.
// Translation tasks as the programs share them: translate trains and serves
// them, heads_study trains the number task many times.
//
//  - numbers: English number words -> fr/de/es, from data/numbers/*.tsv
//    (attograd/data/parallel.h); sources normalised (attograd/data/number_words.h), word or
//    character tokens, scored by exact match.
//  - text: any sentence pairs (a user's files, attograd/data/corpus.h, or the gettext
//    catalogs, attograd/data/gettext_corpus.h), kept as they are (case, punctuation),
//    SentencePiece subwords trained on the training split (one model for both
//    sides, or one per side), scored by BLEU and chrF on detokenized text.
//
// Shape legend: ids are token sequences without BOS/EOS.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/data/parallel.h>
#include <attograd/data/sentencepiece.h>
#include "examples/common/trainer.h"

namespace attograd::app {

struct TranslationTask {
  std::string corpus = "numbers";  // "numbers" or "text" (the file comment)
  std::string source = "en";       // source language (a name for messages and the checkpoint)
  std::string lang;                // target language: fr, de or es for numbers, any name for text
  std::string src_tokenizer;       // "hyphen" (numbers) or "sentencepiece" (text)
  std::string tgt_tokenizer;       // "hyphen" (fr, es), "char" (de) or "sentencepiece" (text)
  // Text only: the SentencePiece model files in the checkpoint directory (the
  // same file for a joint vocabulary) and their zlib CRC-32s, checked on load.
  std::string src_model, tgt_model;
  uint32_t src_model_crc = 0, tgt_model_crc = 0;
  std::string subword_kind;  // text: the SentencePiece model type, unigram or bpe
  // Text: where the pairs came from (gettext or a directory), how valid and
  // test were cut from them, and pairs_crc32 of the training part, so resume
  // and eval can tell the same corpus from another.
  std::string corpus_name;
  int64_t valid_size = 0, test_size = 0;
  uint64_t split_seed = 0;
  uint32_t train_crc = 0;

  // The number task into `lang`; ValueError for a language other than fr, de, es.
  static TranslationTask for_language(const std::string& lang);
  // Sentence pairs source -> target with SentencePiece subwords; ValueError for an empty or odd language name.
  static TranslationTask for_text(const std::string& source, const std::string& target, bool joint);
  bool is_text() const { return corpus == "text"; }
  bool joint() const { return src_model == tgt_model; }  // text: one subword model for both sides
  nlohmann::json to_json() const;                                 // the checkpoint's task record
  static TranslationTask from_json(const nlohmann::json& j, const std::string& file);  // IOError when malformed
};

// How a text task's subword vocabularies are trained on its training split.
struct SubwordOptions {
  std::string kind = "unigram";  // SentencePiece model type: unigram or bpe
  int64_t vocab_size = 2000;     // pieces per model (specials included)
  bool joint = true;             // one model over sources and targets, or one per side
};

// The number corpus beside the running program, <program's dir>/../share/attograd/numbers:
// data/numbers through a link from the build tree (build/bin/translate), the installed
// copy under an install prefix (bin/attograd-translate, share/attograd/numbers). Never
// the current directory; --data overrides it.
std::string default_corpus_dir();

// A split of the corpus: a name in data_dir (train, valid, test, gen) or a path to a TSV file.
// Read with read_file_bytes' bound text_input_limit() (memory_estimate.h).
// Its English sources are normalised as translate normalises its input
// (normalize_number_words, attograd/data/number_words.h), so training, eval and
// translate read the same text.
ParallelText read_split(const std::string& data_dir, const std::string& split, const std::string& lang);

// Everything the modes share once the vocabularies are known.
struct Translator {
  TranslationTask task;
  Vocab src_vocab, tgt_vocab;
  std::unique_ptr<Tokenizer> src_tok, tgt_tok;
  std::shared_ptr<const SentencePieceTokenizer> src_model, tgt_model;  // text tasks' subword models, else null

  // A numbers task: tokenizers by name (make_tokenizer).
  Translator(TranslationTask t, Vocab src, Vocab tgt);
  // A text task: the subword models (the same one twice for a joint vocabulary).
  Translator(TranslationTask t, std::shared_ptr<const SentencePieceTokenizer> src_model,
             std::shared_ptr<const SentencePieceTokenizer> tgt_model);
  // A numbers task's vocabularies built from the training split's sentences.
  static Translator from_training_text(const TranslationTask& t, const ParallelText& train);
  // A text task's subword models trained on the training split (ValueError,
  // from SentencePiece, when the text cannot give vocab_size pieces).
  static Translator train_subwords(TranslationTask t, const ParallelText& train, const SubwordOptions& o);
  // Writes the subword models into a checkpoint directory under the task's
  // file names (a text task; nothing for numbers).
  void save_subwords(const std::string& dir) const;
  // The subword models of a text task from the checkpoint directory, checked against the task's CRC-32s.
  static Translator load_subwords(const TranslationTask& t, const std::string& dir);

  VectorDataset encode(const ParallelText& text) const;
  // One input line (line_number counts from 1, for messages) as the model
  // reads it: normalised, split, mapped to ids. `unknown` receives the words
  // read as <unk>. ValueError when the line has no words, or none the model
  // knows (then the model would only guess); the line is shown escaped
  // (fmt's "{:?}": control characters, bidi overrides and NUL as \x1b, \u202e, \x00).
  std::vector<int64_t> encode_input(std::string_view line, int64_t line_number, std::vector<std::string>& unknown) const;
  std::string show_target(const std::vector<int64_t>& ids) const;
  std::string show_source(const std::vector<int64_t>& ids) const;
  // numbers: BLEU over target tokens (words for fr/es, characters for de) and
  // chrF on the joined text. text: BLEU (sacreBLEU's 13a tokenizer) and chrF on
  // the detokenized outputs against `references`, the raw target sentences in
  // the evaluated order (the first e.outputs.size() are used), or, without
  // them, the decoded reference ids.
  void add_metrics(EvalResult& e, const std::vector<std::string>* references = nullptr) const;
  // The trainer's view; `references` (or null) as add_metrics takes them, for the held-out split.
  TaskHooks hooks(const std::vector<std::string>* references = nullptr) const;
};

// A trained model with its task and vocabularies, from a checkpoint directory
// or .model.safetensors file (IOError when it is missing, corrupt or not a
// translate checkpoint).
struct TrainedTranslator {
  std::unique_ptr<Seq2SeqTransformer> model;  // in eval mode
  Translator tr;
};
TrainedTranslator load_translator(const std::string& checkpoint);

// zlib's CRC-32 of the pairs as "source\ttarget\n" lines, in order: the identity of a corpus part.
uint32_t pairs_crc32(const ParallelText& text);

// translate's --corpus name of the built-in gettext catalogs corpus.
inline constexpr const char* kGettextCorpus = "gettext";

// A text task's sentence pairs in their three parts, from the gettext catalogs
// under locale_dir (task.corpus_name kGettextCorpus, attograd/data/gettext_corpus.h)
// or the directory task.corpus_name (read_corpus_dir, attograd/data/corpus.h),
// valid and test cut by the task's valid_size, test_size and split_seed.
struct TextCorpus {
  ParallelText train, valid, test;
  std::string manifest;  // gettext: what each catalog gave; empty for a directory
};
// Reads task's corpus into its three parts, as TextCorpus describes.
TextCorpus read_text_corpus(const TranslationTask& task, const std::string& locale_dir);

// Longest source or target (tokens) over the datasets: the model's max_len must exceed it by 2 (BOS/EOS).
int64_t longest_sequence(const std::vector<const VectorDataset*>& sets);

// "loss 0.0123  token accuracy 99.10%  exact match 97.30%  BLEU 98.12  chrF 99.01"
std::string metrics_line(const EvalResult& e);

}  // namespace attograd::app
