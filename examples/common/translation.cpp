#include "examples/common/translation.h"

#include <filesystem>

#include <fmt/format.h>

#include <attograd/data/bleu.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/number_words.h>
#include "examples/common/checkpoint_model.h"
#include "examples/common/memory_estimate.h"

namespace attograd {

TranslationTask TranslationTask::for_language(const std::string& lang) {
  return {lang, std::string(kNumberSourceTokenizer), number_target_tokenizer(lang)};
}

nlohmann::json TranslationTask::to_json() const {
  return {{"task", "translate"},          {"source", kNumberSourceLanguage}, {"target", lang},
          {"src_tokenizer", src_tokenizer}, {"tgt_tokenizer", tgt_tokenizer}};
}

TranslationTask TranslationTask::from_json(const nlohmann::json& j, const std::string& file) {
  try {
    if (j.at("task").get<std::string>() != "translate")
      fail<IOError>("checkpoint", "{} is not a translate checkpoint (task '{}')", file, j.at("task").get<std::string>());
    return {j.at("target").get<std::string>(), j.at("src_tokenizer").get<std::string>(),
            j.at("tgt_tokenizer").get<std::string>()};
  } catch (const nlohmann::json::exception& e) {
    fail<IOError>("checkpoint", "{}: bad task metadata ({})", file, e.what());
  }
}

std::string default_corpus_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    fail<IOError>("data", "cannot locate the running program (/proc/self/exe: {}); hint: pass --data, the corpus "
                  "directory", ec.message());
  return (exe.parent_path().parent_path() / "share" / "attograd" / "numbers").string();
}

ParallelText read_split(const std::string& data_dir, const std::string& split, const std::string& lang) {
  const bool is_path = split.find('/') != std::string::npos || split.ends_with(".tsv");
  const std::string path = is_path ? split : data_dir + "/" + split + ".tsv";
  if (!std::filesystem::exists(path))
    fail<IOError>("data", "{} does not exist; hint: {}", path,
                  is_path ? "check the path" : "the split is train, valid, test or gen, and --data the corpus directory "
                                               "(data/numbers in the repository, share/attograd/numbers when installed)");
  ParallelText text = parse_parallel_tsv(read_file_bytes(path, text_input_limit()), kNumberSourceLanguage, lang, path);
  for (std::string& s : text.sources) s = normalize_number_words(s);
  return text;
}

Translator::Translator(TranslationTask t, Vocab src, Vocab tgt)
    : task(std::move(t)), src_vocab(std::move(src)), tgt_vocab(std::move(tgt)),
      src_tok(make_tokenizer(task.src_tokenizer)), tgt_tok(make_tokenizer(task.tgt_tokenizer)) {}

Translator Translator::from_training_text(const TranslationTask& t, const ParallelText& train) {
  const auto src_tok = make_tokenizer(t.src_tokenizer), tgt_tok = make_tokenizer(t.tgt_tokenizer);
  return Translator(t, Vocab::build(train.sources, *src_tok), Vocab::build(train.targets, *tgt_tok));
}

VectorDataset Translator::encode(const ParallelText& text) const {
  return encode_parallel(text, *src_tok, src_vocab, *tgt_tok, tgt_vocab);
}

std::vector<int64_t> Translator::encode_input(std::string_view line, int64_t line_number,
                                             std::vector<std::string>& unknown) const {
  const std::vector<std::string> words = src_tok->split(normalize_number_words(line));
  if (words.empty()) fail<ValueError>("translate", "input line {} ({:?}) has no words", line_number, line);
  std::vector<int64_t> ids = src_vocab.encode(words);
  bool knows_a_word = false;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] == kUnkId) unknown.push_back(words[k]);
    else knows_a_word |= words[k] != "-";
  }
  if (!knows_a_word)
    fail<ValueError>("translate", "input line {} ({:?}) has no word the model knows; it reads whole numbers from 0 to "
                     "{},{:03} in English words or digits, e.g. 'three thousand four hundred and eighty-five' or 3485",
                     line_number, line, kMaxNumberWords / 1000, kMaxNumberWords % 1000);
  return ids;
}

std::string Translator::show_target(const std::vector<int64_t>& ids) const {
  return tgt_tok->join(tgt_vocab.decode_sequence(ids));
}
std::string Translator::show_source(const std::vector<int64_t>& ids) const {
  return src_tok->join(src_vocab.decode_sequence(ids));
}

void Translator::add_metrics(EvalResult& e) const {
  if (e.outputs.empty()) return;
  std::vector<TokenSeq> hyp, ref;
  std::vector<std::string> hyp_text, ref_text;
  for (size_t i = 0; i < e.outputs.size(); ++i) {
    hyp.push_back(tgt_vocab.decode(e.outputs[i]));
    ref.push_back(tgt_vocab.decode(e.references[i]));
    hyp_text.push_back(tgt_tok->join(hyp.back()));
    ref_text.push_back(tgt_tok->join(ref.back()));
  }
  e.extra.emplace_back("bleu", corpus_bleu(hyp, ref).score);
  e.extra.emplace_back("chrf", corpus_chrf(hyp_text, ref_text));
}

TaskHooks Translator::hooks() const {
  TaskHooks h;
  h.task = task.to_json();
  h.src_vocab = &src_vocab;
  h.tgt_vocab = &tgt_vocab;
  h.add_metrics = [this](EvalResult& e) { add_metrics(e); };
  h.show = [this](const std::vector<int64_t>& ids, bool target) { return target ? show_target(ids) : show_source(ids); };
  return h;
}

namespace {

Vocab vocab_from_meta(const std::vector<std::string>& tokens, const std::string& file) {
  if (tokens.size() < static_cast<size_t>(kNumSpecials))
    fail<IOError>("checkpoint", "{}: the vocabulary in the metadata is malformed", file);
  Vocab v = Vocab::from_symbols(std::vector<std::string>(tokens.begin() + kNumSpecials, tokens.end()));
  if (v.tokens() != tokens) fail<IOError>("checkpoint", "{}: the vocabulary in the metadata is malformed", file);
  return v;
}

}  // namespace

TrainedTranslator load_translator(const std::string& checkpoint) {
  if (checkpoint.empty())
    fail<ValueError>("flags", "--checkpoint is required; hint: pass the --checkpoint-dir used in training");
  Checkpoint c = load_checkpoint(checkpoint, false);
  const TranslationTask task = TranslationTask::from_json(c.meta.task, c.model_path);
  TrainedTranslator t{nullptr, Translator(task, vocab_from_meta(c.meta.vocab_src, c.model_path),
                                          vocab_from_meta(c.meta.vocab_tgt, c.model_path))};
  t.model = seq2seq_from_checkpoint(c);
  return t;
}

int64_t longest_sequence(const std::vector<const VectorDataset*>& sets) {
  int64_t longest = 0;
  for (const VectorDataset* d : sets)
    for (const Example& e : d->examples())
      longest = std::max<int64_t>(longest, static_cast<int64_t>(std::max(e.src.size(), e.tgt.size())));
  return longest;
}

std::string metrics_line(const EvalResult& e) {
  std::string s = fmt::format("loss {:.4f}  token accuracy {:.2f}%  exact match {:.2f}%", e.loss, 100 * e.token_accuracy,
                              100 * e.exact_match);
  for (auto& [k, v] : e.extra) s += fmt::format("  {} {:.2f}", k == "bleu" ? "BLEU" : k == "chrf" ? "chrF" : k, v);
  return s;
}

}  // namespace attograd
