#include "examples/common/translation.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include <attograd/data/bleu.h>
#include <attograd/data/corpus.h>
#include <attograd/data/gettext_corpus.h>
#include <attograd/autograd/io/safetensors.h>
#include "examples/common/number_words.h"
#include "examples/common/checkpoint_model.h"
#include "examples/common/memory_estimate.h"

namespace attograd::app {

namespace {

constexpr const char* kSubwordTokenizer = "sentencepiece";

// A language name as it goes into file names and messages: letters, digits, '-' and '_', 1 to 16 of them.
void check_language(const std::string& name, const char* flag) {
  const bool ok = !name.empty() && name.size() <= 16 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '@';
  });
  if (!ok)
    fail<ValueError>("flags", "{} {:?} is not a language name; expected 1 to 16 letters, digits, '-', '_' or '@' "
                     "(e.g. fr, pt_BR, sr@latin)", flag, name);
}

uint32_t crc32_of(std::string_view bytes) {
  return static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()),
                                       static_cast<uInt>(bytes.size())));
}

}  // namespace

TranslationTask TranslationTask::for_language(const std::string& lang) {
  TranslationTask t;
  t.lang = lang;
  t.src_tokenizer = std::string(kNumberSourceTokenizer);
  t.tgt_tokenizer = number_target_tokenizer(lang);
  return t;
}

TranslationTask TranslationTask::for_text(const std::string& source, const std::string& target, bool joint) {
  check_language(source, "--src");
  check_language(target, "--tgt");
  TranslationTask t;
  t.corpus = "text";
  t.source = source;
  t.lang = target;
  t.src_tokenizer = t.tgt_tokenizer = kSubwordTokenizer;
  t.src_model = joint ? "sentencepiece.model" : "sentencepiece." + source + ".model";
  t.tgt_model = joint ? t.src_model : "sentencepiece." + target + ".model";
  if (!joint && source == target)
    fail<ValueError>("flags", "--src and --tgt are both '{}'; separate vocabularies need two names", source);
  return t;
}

nlohmann::json TranslationTask::to_json() const {
  nlohmann::json j = {{"task", "translate"},           {"corpus", corpus},
                      {"source", source},              {"target", lang},
                      {"src_tokenizer", src_tokenizer}, {"tgt_tokenizer", tgt_tokenizer}};
  if (is_text()) {
    j["src_model"] = src_model;
    j["tgt_model"] = tgt_model;
    j["src_model_crc32"] = src_model_crc;
    j["tgt_model_crc32"] = tgt_model_crc;
    j["subword"] = subword_kind;
    j["corpus_name"] = corpus_name;
    j["valid_size"] = valid_size;
    j["test_size"] = test_size;
    j["split_seed"] = split_seed;
    j["train_crc32"] = train_crc;
  }
  return j;
}

TranslationTask TranslationTask::from_json(const nlohmann::json& j, const std::string& file) {
  try {
    if (j.at("task").get<std::string>() != "translate")
      fail<IOError>("checkpoint", "{} is not a translate checkpoint (task '{}')", file, j.at("task").get<std::string>());
    TranslationTask t;
    t.corpus = j.value("corpus", std::string("numbers"));  // checkpoints before text tasks were all numbers
    t.source = j.value("source", std::string(kNumberSourceLanguage));
    t.lang = j.at("target").get<std::string>();
    t.src_tokenizer = j.at("src_tokenizer").get<std::string>();
    t.tgt_tokenizer = j.at("tgt_tokenizer").get<std::string>();
    if (t.corpus != "numbers" && t.corpus != "text")
      fail<IOError>("checkpoint", "{}: unknown corpus kind '{}' in the task metadata", file, t.corpus);
    if (t.is_text()) {
      t.src_model = j.at("src_model").get<std::string>();
      t.tgt_model = j.at("tgt_model").get<std::string>();
      t.src_model_crc = j.at("src_model_crc32").get<uint32_t>();
      t.tgt_model_crc = j.at("tgt_model_crc32").get<uint32_t>();
      t.subword_kind = j.at("subword").get<std::string>();
      t.corpus_name = j.at("corpus_name").get<std::string>();
      t.valid_size = j.at("valid_size").get<int64_t>();
      t.test_size = j.at("test_size").get<int64_t>();
      t.split_seed = j.at("split_seed").get<uint64_t>();
      t.train_crc = j.at("train_crc32").get<uint32_t>();
      if (t.valid_size < 1 || t.test_size < 1)
        fail<IOError>("checkpoint", "{}: split sizes {} and {} in the task metadata are not positive", file,
                      t.valid_size, t.test_size);
      if (t.subword_kind != "unigram" && t.subword_kind != "bpe")
        fail<IOError>("checkpoint", "{}: unknown subword model type '{}'", file, t.subword_kind);
      for (const std::string* name : {&t.src_model, &t.tgt_model})
        if (!name->starts_with("sentencepiece.") || !name->ends_with(".model") || name->find('/') != std::string::npos)
          fail<IOError>("checkpoint", "{}: subword model name {:?} is not a sentencepiece.*.model file name", file, *name);
    }
    return t;
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

Translator::Translator(TranslationTask t, std::shared_ptr<const SentencePieceTokenizer> src,
                       std::shared_ptr<const SentencePieceTokenizer> tgt)
    : task(std::move(t)), src_model(std::move(src)), tgt_model(std::move(tgt)) {
  auto src_pieces = std::make_unique<SentencePiecePieces>(src_model);
  auto tgt_pieces = std::make_unique<SentencePiecePieces>(tgt_model);
  src_vocab = Vocab::from_symbols(src_pieces->vocab_symbols());
  tgt_vocab = Vocab::from_symbols(tgt_pieces->vocab_symbols());
  src_tok = std::move(src_pieces);
  tgt_tok = std::move(tgt_pieces);
}

Translator Translator::from_training_text(const TranslationTask& t, const ParallelText& train) {
  const auto src_tok = make_tokenizer(t.src_tokenizer), tgt_tok = make_tokenizer(t.tgt_tokenizer);
  return Translator(t, Vocab::build(train.sources, *src_tok), Vocab::build(train.targets, *tgt_tok));
}

namespace {

// The sentences one per line, as SentencePiece's trainer reads them.
std::string as_lines(const std::vector<std::string>& sentences) {
  std::string text;
  for (const std::string& s : sentences) (text += s) += '\n';
  return text;
}

}  // namespace

Translator Translator::train_subwords(TranslationTask t, const ParallelText& train, const SubwordOptions& o) {
  std::shared_ptr<const SentencePieceTokenizer> src, tgt;
  if (o.joint) {
    src = tgt = std::make_shared<SentencePieceTokenizer>(
        SentencePieceTokenizer::train(as_lines(train.sources) + as_lines(train.targets), o.kind, o.vocab_size));
  } else {
    src = std::make_shared<SentencePieceTokenizer>(SentencePieceTokenizer::train(as_lines(train.sources), o.kind, o.vocab_size));
    tgt = std::make_shared<SentencePieceTokenizer>(SentencePieceTokenizer::train(as_lines(train.targets), o.kind, o.vocab_size));
  }
  t.subword_kind = o.kind;
  t.src_model_crc = crc32_of(src->model_proto());
  t.tgt_model_crc = crc32_of(tgt->model_proto());
  return Translator(std::move(t), std::move(src), std::move(tgt));
}

void Translator::save_subwords(const std::string& dir) const {
  if (!task.is_text()) return;
  write_file_atomic(dir + "/" + task.src_model, src_model->model_proto());
  if (!task.joint()) write_file_atomic(dir + "/" + task.tgt_model, tgt_model->model_proto());
}

Translator Translator::load_subwords(const TranslationTask& t, const std::string& dir) {
  // A SentencePiece model of a million pieces is about 20 MB.
  constexpr uint64_t kMaxModelBytes = uint64_t{1} << 30;
  const auto load = [&](const std::string& name, uint32_t crc) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path))
      fail<IOError>("checkpoint", "{} is missing: the checkpoint's subword model; hint: copy the whole checkpoint "
                    "directory, sentencepiece*.model files included", path);
    std::string bytes = read_file_bytes(path, kMaxModelBytes);
    if (crc32_of(bytes) != crc)
      fail<IOError>("checkpoint", "{} has CRC-32 {:08x}, the checkpoint expects {:08x}: it is not the model this "
                    "checkpoint was trained with", path, crc32_of(bytes), crc);
    return std::make_shared<const SentencePieceTokenizer>(SentencePieceTokenizer::from_proto(std::move(bytes), t.subword_kind, path));
  };
  auto src = load(t.src_model, t.src_model_crc);
  auto tgt = t.joint() ? src : load(t.tgt_model, t.tgt_model_crc);
  return Translator(t, std::move(src), std::move(tgt));
}

VectorDataset Translator::encode(const ParallelText& text) const {
  return encode_parallel(text, *src_tok, src_vocab, *tgt_tok, tgt_vocab);
}

std::vector<int64_t> Translator::encode_input(std::string_view line, int64_t line_number,
                                             std::vector<std::string>& unknown) const {
  const std::vector<std::string> words =
      task.is_text() ? src_tok->split(line) : src_tok->split(normalize_number_words(line));
  if (words.empty()) fail<ValueError>("translate", "input line {} ({:?}) has no words", line_number, line);
  std::vector<int64_t> ids = src_vocab.encode(words);
  bool knows_a_word = false;
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] == kUnkId && !task.is_text()) unknown.push_back(words[k]);
    knows_a_word |= ids[k] != kUnkId && words[k] != "-";
  }
  if (task.is_text()) {  // a subword <unk> stands for characters the model never saw: name them, once each
    const auto& pieces = static_cast<const SentencePiecePieces&>(*src_tok);
    for (size_t pos = 0; pos < line.size();) {
      const size_t n = utf8_char_length(line, pos, "translate");
      const std::string c(line.substr(pos, n));
      pos += n;
      if (c != " " && !pieces.has_piece(c) && std::find(unknown.begin(), unknown.end(), c) == unknown.end())
        unknown.push_back(c);
    }
  }
  if (!knows_a_word && task.is_text())
    fail<ValueError>("translate", "input line {} ({:?}) has no character the model saw in training; it reads {} text",
                     line_number, line, task.source);
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

void Translator::add_metrics(EvalResult& e, const std::vector<std::string>* references) const {
  if (e.outputs.empty()) return;
  if (references && references->size() < e.outputs.size())
    fail<ValueError>("add_metrics", "{} reference sentences for {} outputs", references->size(), e.outputs.size());
  if (task.is_text()) {
    std::vector<std::string> hyp_text, ref_text;
    for (size_t i = 0; i < e.outputs.size(); ++i) {
      hyp_text.push_back(show_target(e.outputs[i]));
      ref_text.push_back(references ? (*references)[i] : show_target(e.references[i]));
    }
    e.extra.emplace_back("bleu", corpus_bleu_13a(hyp_text, ref_text).score);
    e.extra.emplace_back("chrf", corpus_chrf(hyp_text, ref_text));
    return;
  }
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

TaskHooks Translator::hooks(const std::vector<std::string>* references) const {
  TaskHooks h;
  h.task = task.to_json();
  h.src_vocab = &src_vocab;
  h.tgt_vocab = &tgt_vocab;
  h.add_metrics = [this, references](EvalResult& e) { add_metrics(e, references); };
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
  if (!task.is_text()) {
    TrainedTranslator t{nullptr, Translator(task, vocab_from_meta(c.meta.vocab_src, c.model_path),
                                            vocab_from_meta(c.meta.vocab_tgt, c.model_path))};
    t.model = seq2seq_from_checkpoint(c);
    return t;
  }
  const std::filesystem::path dir = std::filesystem::path(c.model_path).parent_path();
  TrainedTranslator t{nullptr, Translator::load_subwords(task, dir.empty() ? "." : dir.string())};
  if (t.tr.src_vocab.tokens() != c.meta.vocab_src || t.tr.tgt_vocab.tokens() != c.meta.vocab_tgt)
    fail<IOError>("checkpoint", "{}: its vocabulary is not the one of its subword models", c.model_path);
  t.model = seq2seq_from_checkpoint(c);
  return t;
}

uint32_t pairs_crc32(const ParallelText& text) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (int64_t i = 0; i < text.size(); ++i)
    for (const std::string_view part : {std::string_view(text.sources[static_cast<size_t>(i)]), std::string_view("\t"),
                                        std::string_view(text.targets[static_cast<size_t>(i)]), std::string_view("\n")})
      crc = ::crc32(crc, reinterpret_cast<const Bytef*>(part.data()), static_cast<uInt>(part.size()));
  return static_cast<uint32_t>(crc);
}

TextCorpus read_text_corpus(const TranslationTask& task, const std::string& locale_dir) {
  TextCorpus c;
  if (task.corpus_name == kGettextCorpus) {
    GettextCorpusOptions go;
    go.locale_root = locale_dir;
    go.language = task.lang;
    go.seed = task.split_seed;
    go.valid_size = task.valid_size;
    go.test_size = task.test_size;
    GettextCorpus g = load_gettext_corpus(go);
    c.manifest = g.manifest_text();
    c.train = std::move(g.train);
    c.valid = std::move(g.valid);
    c.test = std::move(g.test);
  } else {
    CorpusSplits s = read_corpus_dir(task.corpus_name, task.source, task.lang, task.valid_size, task.test_size,
                                     task.split_seed);
    c.train = std::move(s.train);
    c.valid = std::move(s.valid);
    c.test = std::move(s.test);
  }
  return c;
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

}  // namespace attograd::app
