// Tokenizers for a language model: text <-> token ids, trained on the text,
// saved beside the checkpoint and loaded back from there.
//
//  - char:          one token per Unicode code point of the UTF-8 text. Id 0 is
//                   <unk> (decoded as U+FFFD); the others are the text's characters,
//                   most frequent first (ties in byte order). With a vocabulary
//                   size, only the vocab_size − 1 most frequent ones are kept.
//                   Invalid UTF-8 is a ValueError naming the byte offset.
//  - bpe, unigram:  SentencePiece subwords (attograd/data/sentencepiece.h).
//
// Files in a directory: tokenizer.json {"kind": ..., ...}; SentencePiece adds tokenizer.model.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attograd {

// A language model's tokenizer (char, bpe or unigram): text <-> ids in
// [0, vocab_size()), id 0 being <unk>; train_lm_tokenizer makes one and
// load_lm_tokenizer reads back what save wrote.
class LMTokenizer {
 public:
  virtual ~LMTokenizer() = default;
  // text -> its token ids, 0 (<unk>) for a character the vocabulary lacks.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // ids -> text, <unk> shown as a replacement mark; IndexError for an id
  // outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // How many ids there are, <unk> included (the model's V).
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;  // "char", "bpe" or "unigram"
  // Writes dir/tokenizer.json (and whatever else the kind needs); IOError on failure.
  virtual void save(const std::string& dir) const = 0;
};

// The char kind: one token per Unicode code point, id 0 <unk> and id i the
// character symbols()[i − 1].
class CharLMTokenizer : public LMTokenizer {
 public:
  // symbols: the characters of ids 1, 2, ... (id 0 is <unk>); each one code point.
  // ValueError when a symbol is not one character or appears twice.
  explicit CharLMTokenizer(std::vector<std::string> symbols);
  // Every character of text (vocab_size 0), or the vocab_size − 1 most frequent.
  static CharLMTokenizer train(std::string_view text, int64_t vocab_size = 0);
  // One id per code point, 0 for a character not in symbols(); ValueError
  // naming the byte offset of invalid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const override;
  // The symbols of ids joined, U+FFFD for id 0; IndexError for an id outside
  // [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const override;
  // symbols().size() + 1 (the characters and <unk>).
  int64_t vocab_size() const override { return static_cast<int64_t>(symbols_.size()) + 1; }
  std::string kind() const override { return "char"; }
  void save(const std::string& dir) const override;
  // The characters of ids 1, 2, ..., in id order (most frequent first after train).
  const std::vector<std::string>& symbols() const { return symbols_; }

 private:
  std::vector<std::string> symbols_;
  std::unordered_map<std::string, int32_t> ids_;
};

// What train_lm_tokenizer trains: the kind and its vocabulary size.
struct LMTokenizerOptions {
  std::string kind = "char";  // "char", "bpe" or "unigram"
  int64_t vocab_size = 0;     // char: 0 keeps every character; bpe/unigram: required
};

// Trains a tokenizer of opt.kind on text (ValueError for an unknown kind, a
// text without characters, or a vocabulary the text cannot fill).
std::unique_ptr<LMTokenizer> train_lm_tokenizer(std::string_view text, const LMTokenizerOptions& opt);
// Loads what save(dir) wrote; IOError naming the file when it is missing or bad.
std::unique_ptr<LMTokenizer> load_lm_tokenizer(const std::string& dir);

}  // namespace attograd
