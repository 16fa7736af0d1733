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
//
// A build without SentencePiece (ATTOGRAD_SENTENCEPIECE=OFF,
// build_features().sentencepiece false) keeps this API, but train, load and
// from_proto are a ValueError naming the library to install.
#pragma once
#include <memory>
#include <unordered_map>

#include <attograd/data/lm_tokenizer.h>
#include <attograd/data/tokenizer.h>

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

  // The piece with this id (its text, spaces shown as "▁"); IndexError outside [0, vocab_size()).
  std::string piece(int32_t id) const;
  // The serialized model, the bytes of a .model file.
  const std::string& model_proto() const { return model_; }
  // A model from the bytes of a .model file (model_proto()); IOError naming `name` when they are not one.
  static SentencePieceTokenizer from_proto(std::string model_proto, const std::string& kind, const std::string& name);

 private:
  SentencePieceTokenizer(std::string serialized_model, std::string kind);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_;  // the serialized model proto
  std::string kind_;
};

// SentencePiece's pieces as a Tokenizer (attograd/data/tokenizer.h), so a Vocab can hold
// them and the translation pipeline (Vocab, encode_parallel, BLEU) reads
// subwords as it reads words. split(text) is the pieces' text, join(pieces)
// decodes them, so join(split(s)) == s for text of the trained characters; a
// piece the model does not know (Vocab's "<unk>") decodes as SentencePiece's
// <unk>, " ⁇ ".
//
// Ids. SentencePieceTokenizer::train makes pieces 0..3 <unk>, <s>, </s> and
// "\n"; vocab_symbols() is the rest, in id order, so in the Vocab built from
// it (four specials first: <pad>, <bos>, <eos>, <unk>) every piece keeps its
// SentencePiece id and the Vocab has vocab_size() entries.
class SentencePiecePieces : public Tokenizer {
 public:
  // ValueError when the model's first four pieces are not <unk>, <s>, </s>, "\n".
  explicit SentencePiecePieces(std::shared_ptr<const SentencePieceTokenizer> model);
  // The pieces of text, <unk> for characters the model never saw.
  std::vector<std::string> split(std::string_view text) const override;
  // The text of the pieces; a string that is not a piece decodes as <unk>.
  std::string join(const std::vector<std::string>& tokens) const override;
  std::string name() const override { return "sentencepiece"; }
  // Whether `piece` is one of the model's pieces (a character the model saw is one).
  bool has_piece(std::string_view piece) const { return ids_.count(std::string(piece)) > 0; }
  // Pieces 4.. in id order: Vocab::from_symbols(vocab_symbols()) keeps SentencePiece's ids.
  std::vector<std::string> vocab_symbols() const;
  // The model split and join use.
  const SentencePieceTokenizer& model() const { return *model_; }

 private:
  std::shared_ptr<const SentencePieceTokenizer> model_;
  std::unordered_map<std::string, int32_t> ids_;  // piece text -> id, for join
};

}  // namespace attograd
