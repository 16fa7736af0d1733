// Tokenizers: text <-> token strings. Vocab maps the tokens to ids.
//
//  - WhitespaceTokenizer (word level): split on runs of ASCII whitespace,
//    join with one space. "  two  words " -> {"two", "words"}.
//  - CharTokenizer: one token per UTF-8 code point, spaces included; join
//    concatenates, so join(split(s)) == s for any valid UTF-8 s.
//    "süß" -> {"s", "ü", "ß"}; invalid UTF-8 is a ValueError naming the byte.
//  - HyphenWordTokenizer (word level, hyphens split off): whitespace words,
//    each cut at '-' with "-" kept as a token of its own; join glues "-" to
//    both neighbours. "quatre-vingt-onze mille" -> {"quatre", "-", "vingt",
//    "-", "onze", "mille"}, and join gives the text back for any text without
//    runs of spaces or spaces next to a hyphen.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attograd {

// Splits text into tokens and joins them back: join(split(t)) gives t again,
// up to whitespace.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // text -> tokens.
  virtual std::vector<std::string> split(std::string_view text) const = 0;
  // tokens -> text.
  virtual std::string join(const std::vector<std::string>& tokens) const = 0;
  virtual std::string name() const = 0;  // "word" or "char"
};

// Words: runs of non-space characters ("word").
class WhitespaceTokenizer : public Tokenizer {
 public:
  // Words between runs of ASCII whitespace.
  std::vector<std::string> split(std::string_view text) const override;
  // Tokens separated by one space.
  std::string join(const std::vector<std::string>& tokens) const override;
  std::string name() const override { return "word"; }
};

// One token per UTF-8 code point, spaces included ("char").
class CharTokenizer : public Tokenizer {
 public:
  // Code points of text; invalid UTF-8 is a ValueError naming the byte.
  std::vector<std::string> split(std::string_view text) const override;
  // The tokens concatenated.
  std::string join(const std::vector<std::string>& tokens) const override;
  std::string name() const override { return "char"; }
};

// Words, with each hyphen a token of its own ("hyphen"): "twenty-one" -> twenty, -, one.
class HyphenWordTokenizer : public Tokenizer {
 public:
  // Whitespace words, split at hyphens, the hyphens kept as tokens.
  std::vector<std::string> split(std::string_view text) const override;
  // Words separated by one space, hyphens glued to their neighbours.
  std::string join(const std::vector<std::string>& tokens) const override;
  std::string name() const override { return "hyphen"; }
};

// "word" (or "whitespace"), "hyphen" or "char"; anything else is a ValueError.
std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name);

// Byte length of the UTF-8 code point starting at text[pos]; ValueError
// (naming `op` and the byte offset) for an invalid or truncated sequence.
size_t utf8_char_length(std::string_view text, size_t pos, const char* op);

}  // namespace attograd
