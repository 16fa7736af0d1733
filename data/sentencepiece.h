// Subword tokenizers through SentencePiece (Debian's libsentencepiece-dev):
// BPE or unigram, trained on a text with a chosen vocabulary size.
//
// The text is kept as it is: no Unicode normalisation, no whitespace
// collapsing, no dummy prefix, and "\n" is a piece of its own, so
// decode(encode(text)) == text for every text made of the trained characters.
// Unknown characters become <unk> (id 0), decoded as " ⁇ ".
// Training reads the text line by line and samples at most a million lines;
// a line longer than SentencePiece's 4192-byte limit is fed in pieces cut
// before a space (or, with no space to cut at, between two characters), so
// no line is skipped.
#pragma once
#include <memory>

#include <attograd/data/lm_tokenizer.h>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace attograd {

// The bpe and unigram kinds: a SentencePiece model that keeps the text as it
// is (see the file comment), id 0 being <unk>.
class SentencePieceTokenizer : public LMTokenizer {
 public:
  // kind "bpe" or "unigram"; ValueError when the text cannot give vocab_size pieces.
  static SentencePieceTokenizer train(std::string_view text, const std::string& kind, int64_t vocab_size);
  // A .model file (SentencePiece's own format, as python's sentencepiece writes
  // it); IOError naming model_path when it is missing or not such a model.
  static SentencePieceTokenizer load(const std::string& model_path, const std::string& kind);
  // Takes over the model; the moved-from tokenizer may only be destroyed.
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer() override;

  // text -> piece ids, 0 for an unknown character (encoded in chunks of about
  // 64 KiB cut after a "\n", which gives the same ids); ValueError when
  // SentencePiece fails.
  std::vector<int32_t> encode(std::string_view text) const override;
  // ids -> text, <unk> as " ⁇ "; IndexError for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const override;
  // The model's number of pieces, <unk> and the control pieces included.
  int64_t vocab_size() const override;
  std::string kind() const override { return kind_; }
  void save(const std::string& dir) const override;  // tokenizer.json + tokenizer.model

 private:
  SentencePieceTokenizer(std::string serialized_model, std::string kind);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_;  // the serialized model proto
  std::string kind_;
};

}  // namespace attograd
