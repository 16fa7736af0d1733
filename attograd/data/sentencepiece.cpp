#include <attograd/data/sentencepiece.h>

#include <array>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tokenizer.h>

namespace attograd {

namespace {

// SentencePiece's trainer skips a sentence longer than this (TrainerSpec
// max_sentence_length, in bytes; this is its default).
constexpr size_t kMaxSentenceBytes = 4192;

// Where to end a piece of a long line that starts at `pos`, at most `limit`
// bytes on: before its last space (the trainer splits pieces there anyway:
// split_by_whitespace, the space starting the next piece), else after the
// last whole UTF-8 character.
size_t cut_long_line(std::string_view line, size_t pos, size_t limit) {
  const size_t space = line.rfind(' ', pos + limit);
  if (space != std::string_view::npos && space > pos) return space;
  size_t end = pos + limit;
  while (end > pos + 1 && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) --end;
  return end;
}

// The text's non-empty lines, without their "\n", as SentencePiece's trainer
// reads sentences; a line over kMaxSentenceBytes comes in pieces of at most
// that many bytes (cut_long_line), so no text is skipped.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (pos_ < text_.size()) {
      const size_t line_end = std::min(text_.find('\n', pos_), text_.size());
      const size_t end = line_end - pos_ > kMaxSentenceBytes ? cut_long_line(text_, pos_, kMaxSentenceBytes) : line_end;
      line_.assign(text_.substr(pos_, end - pos_));
      pos_ = end == line_end ? end + 1 : end;
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

// Encodes in pieces of about this many bytes, each ending after a "\n" ("\n" is
// a piece of its own and there is no dummy prefix, so the ids are the same).
constexpr size_t kEncodeChunk = 1 << 16;

// A .model file larger than this is refused unread (protobuf's own limit is 2 GiB;
// a 1M-piece model is about 20 MB).
constexpr uint64_t kMaxModelBytes = uint64_t{1} << 30;

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::string model, std::string kind)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), model_(std::move(model)), kind_(std::move(kind)) {
  if (kind_ != "bpe" && kind_ != "unigram")
    fail<ValueError>("SentencePieceTokenizer", "unknown model type '{}'; hint: bpe or unigram", kind_);
  const auto status = sp_->LoadFromSerializedProto(model_);
  if (!status.ok()) fail<ValueError>("SentencePieceTokenizer", "not a SentencePiece model: {}", status.ToString());
}

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& path, const std::string& kind) {
  std::string model = read_file_bytes(path, kMaxModelBytes);
  try {
    return SentencePieceTokenizer(std::move(model), kind);
  } catch (const ValueError& e) {
    fail<IOError>("SentencePieceTokenizer::load", "{}: {}", path, e.what());
  }
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

SentencePieceTokenizer SentencePieceTokenizer::train(std::string_view text, const std::string& kind, int64_t vocab_size) {
  const char* op = "SentencePieceTokenizer::train";
  if (kind != "bpe" && kind != "unigram") fail<ValueError>(op, "unknown model type '{}'; hint: bpe or unigram", kind);
  if (vocab_size < 4) fail<ValueError>(op, "vocabulary size must be at least 4, got {}", vocab_size);
  for (size_t i = 0; i < text.size();) i += utf8_char_length(text, i, op);
  if (text.find_first_not_of("\n") == std::string_view::npos)
    fail<ValueError>(op, "the text is empty; hint: give a file with some text");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", kind},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"user_defined_symbols", "\n"},
      {"input_sentence_size", "1000000"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"shuffle_input_sentence", "true"},
      {"hard_vocab_limit", "true"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  LineIterator lines(text);
  // Past input_sentence_size lines the trainer samples them; a fixed seed makes
  // that sample, and so the model, the same in every process and run.
  sentencepiece::SetRandomGeneratorSeed(1);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok())
    fail<ValueError>(op, "SentencePiece could not train a {} vocabulary of {} pieces on this text: {}; hint: "
                     "--vocab-size must hold every character of the text and at most what it supports (SentencePiece "
                     "names the bound above)", kind, vocab_size, status.message());
  return SentencePieceTokenizer(std::move(model), kind);
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::vector<int> ids;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', std::min(pos + kEncodeChunk, text.size()));
    end = end == std::string_view::npos ? text.size() : end + 1;
    const auto status = sp_->Encode(text.substr(pos, end - pos), &ids);
    if (!status.ok()) fail<ValueError>("SentencePieceTokenizer::encode", "{}", status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
    pos = end;
  }
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab_size())
      fail<IndexError>("SentencePieceTokenizer::decode", "id {} is outside the vocabulary [0, {})", id, vocab_size());
  std::string out;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &out);
  if (!status.ok()) fail<ValueError>("SentencePieceTokenizer::decode", "{}", status.ToString());
  return out;
}

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::string SentencePieceTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    fail<IndexError>("SentencePieceTokenizer::piece", "id {} is outside the vocabulary [0, {})", id, vocab_size());
  return sp_->IdToPiece(id);
}

SentencePieceTokenizer SentencePieceTokenizer::from_proto(std::string model_proto, const std::string& kind,
                                                          const std::string& name) {
  try {
    return SentencePieceTokenizer(std::move(model_proto), kind);
  } catch (const ValueError& e) {
    fail<IOError>("SentencePieceTokenizer::from_proto", "{}: {}", name, e.what());
  }
}

// ---- SentencePiecePieces --------------------------------------------------------------------

namespace {
// The pieces SentencePieceTokenizer::train puts first, in id order.
constexpr std::array<std::string_view, 4> kLeadingPieces = {"<unk>", "<s>", "</s>", "\n"};
}  // namespace

SentencePiecePieces::SentencePiecePieces(std::shared_ptr<const SentencePieceTokenizer> model)
    : model_(std::move(model)) {
  const int64_t n = model_->vocab_size();
  for (size_t i = 0; i < kLeadingPieces.size(); ++i)
    if (static_cast<int64_t>(i) >= n || model_->piece(static_cast<int32_t>(i)) != kLeadingPieces[i])
      fail<ValueError>("SentencePiecePieces", "piece {} of the model is {:?}, expected {:?}; hint: a model trained by "
                       "SentencePieceTokenizer::train has <unk>, <s>, </s> and \"\\n\" first", i,
                       static_cast<int64_t>(i) < n ? model_->piece(static_cast<int32_t>(i)) : std::string("(none)"),
                       kLeadingPieces[i]);
  for (int32_t id = 0; id < n; ++id) ids_.emplace(model_->piece(id), id);
}

std::vector<std::string> SentencePiecePieces::split(std::string_view text) const {
  std::vector<std::string> pieces;
  for (const int32_t id : model_->encode(text)) pieces.push_back(model_->piece(id));
  return pieces;
}

std::string SentencePiecePieces::join(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& t : tokens) {
    const auto it = ids_.find(t);
    ids.push_back(it == ids_.end() ? 0 : it->second);
  }
  return model_->decode(ids);
}

std::vector<std::string> SentencePiecePieces::vocab_symbols() const {
  std::vector<std::string> symbols;
  for (int32_t id = static_cast<int32_t>(kLeadingPieces.size()); id < model_->vocab_size(); ++id)
    symbols.push_back(model_->piece(id));
  return symbols;
}

// Both files atomically (write_file_atomic), the model first, so tokenizer.json
// never names a model that is not there.
void SentencePieceTokenizer::save(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  write_file_atomic(dir + "/tokenizer.model", model_);
  write_file_atomic(dir + "/tokenizer.json",
                    nlohmann::json{{"kind", kind_}, {"model", "tokenizer.model"}}.dump(1) + "\n");
}

}  // namespace attograd
