#include <attograd/data/lm_tokenizer.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/sentencepiece.h>
#include <attograd/data/tokenizer.h>

namespace attograd {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD, how <unk> is shown

// tokenizer.json is a kind and at most the 1,114,112 code points of Unicode (about 12 MB as JSON).
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{256} << 20;

// Atomic (write_file_atomic), so a killed run never leaves half a tokenizer beside its checkpoint.
void write_json(const std::string& dir, const nlohmann::json& j) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  write_file_atomic(dir + "/tokenizer.json", j.dump(1) + "\n");
}

}  // namespace

CharLMTokenizer::CharLMTokenizer(std::vector<std::string> symbols) : symbols_(std::move(symbols)) {
  for (size_t i = 0; i < symbols_.size(); ++i) {
    const std::string& s = symbols_[i];
    if (s.empty() || utf8_char_length(s, 0, "CharLMTokenizer") != s.size())
      fail<ValueError>("CharLMTokenizer", "symbol {} ('{}') is not one character", i + 1, s);
    if (!ids_.emplace(s, static_cast<int32_t>(i + 1)).second)
      fail<ValueError>("CharLMTokenizer", "symbol '{}' appears twice", s);
  }
}

CharLMTokenizer CharLMTokenizer::train(std::string_view text, int64_t vocab_size) {
  std::map<std::string_view, int64_t> counts;  // byte order, for the ties
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_char_length(text, i, "CharLMTokenizer::train");
    ++counts[text.substr(i, len)];
    i += len;
  }
  if (counts.empty()) fail<ValueError>("CharLMTokenizer::train", "the text is empty; hint: give a file with some text");
  const auto distinct = static_cast<int64_t>(counts.size());
  if (vocab_size < 0 || vocab_size == 1 || vocab_size > distinct + 1)
    fail<ValueError>("CharLMTokenizer::train", "vocabulary size {} does not fit a text of {} distinct characters; "
                     "hint: use 2..{} (<unk> and the characters), or 0 for all of them", vocab_size, distinct,
                     distinct + 1);
  std::vector<std::pair<std::string_view, int64_t>> order(counts.begin(), counts.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (vocab_size > 0) order.resize(static_cast<size_t>(vocab_size - 1));
  std::vector<std::string> symbols;
  for (const auto& [s, n] : order) symbols.emplace_back(s);
  return CharLMTokenizer(std::move(symbols));
}

std::vector<int32_t> CharLMTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size());
  std::string ch;
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_char_length(text, i, "CharLMTokenizer::encode");
    ch.assign(text.substr(i, len));
    const auto it = ids_.find(ch);
    out.push_back(it == ids_.end() ? 0 : it->second);
    i += len;
  }
  return out;
}

std::string CharLMTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || id > static_cast<int64_t>(symbols_.size()))
      fail<IndexError>("CharLMTokenizer::decode", "id {} is outside the vocabulary [0, {})", id, vocab_size());
    out += id == 0 ? kReplacement : std::string_view(symbols_[static_cast<size_t>(id - 1)]);
  }
  return out;
}

void CharLMTokenizer::save(const std::string& dir) const { write_json(dir, {{"kind", "char"}, {"symbols", symbols_}}); }

std::unique_ptr<LMTokenizer> train_lm_tokenizer(std::string_view text, const LMTokenizerOptions& opt) {
  if (opt.kind == "char") return std::make_unique<CharLMTokenizer>(CharLMTokenizer::train(text, opt.vocab_size));
  if (opt.kind == "bpe" || opt.kind == "unigram")
    return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::train(text, opt.kind, opt.vocab_size));
  fail<ValueError>("train_lm_tokenizer", "unknown tokenizer '{}'; hint: char, bpe or unigram", opt.kind);
}

std::unique_ptr<LMTokenizer> load_lm_tokenizer(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    fail<IOError>("load_lm_tokenizer", "cannot open {}; hint: a checkpoint directory written by training", path);
  const std::string text = read_file_bytes(path, kMaxTokenizerJsonBytes);
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "char") return std::make_unique<CharLMTokenizer>(j.at("symbols").get<std::vector<std::string>>());
    if (kind == "bpe" || kind == "unigram")
      return std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load(dir + "/tokenizer.model", kind));
    fail<IOError>("load_lm_tokenizer", "{}: unknown kind '{}'", path, kind);
  } catch (const nlohmann::json::exception& e) {
    fail<IOError>("load_lm_tokenizer", "{} is not a tokenizer file: {}", path, e.what());
  } catch (const ValueError& e) {
    fail<IOError>("load_lm_tokenizer", "{}: {}", path, e.what());
  }
}

}  // namespace attograd
