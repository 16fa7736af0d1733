// SentencePieceTokenizer in a build without SentencePiece
// (ATTOGRAD_SENTENCEPIECE=OFF; CMakeLists.txt compiles this file instead of
// sentencepiece.cpp): every way to make one is a ValueError that names the
// missing library, so the bpe and unigram tokenizers fail at once, with the
// fix, and the char tokenizers and the rest of the library work as ever.
// No tokenizer object can exist, so its members are never reached; they are
// defined (as the same error) because the class's vtable needs them.
#include <attograd/data/sentencepiece.h>

#include <attograd/autograd/error.h>

// The processor SentencePieceTokenizer holds through a unique_ptr, which needs
// a complete type to be destroyed; no object is ever made.
namespace sentencepiece {
class SentencePieceProcessor {};
}  // namespace sentencepiece

namespace attograd {

namespace {

[[noreturn]] void missing(std::string_view op) {
  fail<ValueError>(op, "this attograd was built without SentencePiece, which the bpe and unigram tokenizers need; "
                   "hint: apt install libsentencepiece-dev and rebuild attograd (-DATTOGRAD_SENTENCEPIECE=ON), or "
                   "use the char tokenizer");
}

}  // namespace

SentencePieceTokenizer SentencePieceTokenizer::train(std::string_view, const std::string&, int64_t) {
  missing("SentencePieceTokenizer::train");
}
SentencePieceTokenizer SentencePieceTokenizer::load(const std::string&, const std::string&) {
  missing("SentencePieceTokenizer::load");
}
SentencePieceTokenizer SentencePieceTokenizer::from_proto(std::string, const std::string&, const std::string&) {
  missing("SentencePieceTokenizer::from_proto");
}
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view) const {
  missing("SentencePieceTokenizer::encode");
}
std::string SentencePieceTokenizer::decode(std::span<const int32_t>) const {
  missing("SentencePieceTokenizer::decode");
}
int64_t SentencePieceTokenizer::vocab_size() const { missing("SentencePieceTokenizer::vocab_size"); }
void SentencePieceTokenizer::save(const std::string&) const { missing("SentencePieceTokenizer::save"); }
std::string SentencePieceTokenizer::piece(int32_t) const { missing("SentencePieceTokenizer::piece"); }

SentencePiecePieces::SentencePiecePieces(std::shared_ptr<const SentencePieceTokenizer>) {
  missing("SentencePiecePieces");
}
std::vector<std::string> SentencePiecePieces::split(std::string_view) const { missing("SentencePiecePieces::split"); }
std::string SentencePiecePieces::join(const std::vector<std::string>&) const { missing("SentencePiecePieces::join"); }
std::vector<std::string> SentencePiecePieces::vocab_symbols() const { missing("SentencePiecePieces::vocab_symbols"); }

}  // namespace attograd
