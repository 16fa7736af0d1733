#include <attograd/data/tokenizer.h>

#include <attograd/autograd/error.h>

namespace attograd {

namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

std::vector<std::string> WhitespaceTokenizer::split(std::string_view text) const {
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    const size_t start = i;
    while (i < text.size() && !is_ascii_space(text[i])) ++i;
    if (i > start) tokens.emplace_back(text.substr(start, i - start));
  }
  return tokens;
}

std::string WhitespaceTokenizer::join(const std::vector<std::string>& tokens) const {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) out += ' ';
    out += tokens[i];
  }
  return out;
}

std::vector<std::string> HyphenWordTokenizer::split(std::string_view text) const {
  std::vector<std::string> tokens;
  for (const std::string& word : WhitespaceTokenizer().split(text)) {
    size_t start = 0;
    for (size_t i = 0; i <= word.size(); ++i) {
      if (i < word.size() && word[i] != '-') continue;
      if (i > start) tokens.push_back(word.substr(start, i - start));
      if (i < word.size()) tokens.emplace_back("-");
      start = i + 1;
    }
  }
  return tokens;
}

std::string HyphenWordTokenizer::join(const std::vector<std::string>& tokens) const {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i && tokens[i] != "-" && tokens[i - 1] != "-") out += ' ';
    out += tokens[i];
  }
  return out;
}

// Well-formed UTF-8 (Unicode 15, table 3-7): no overlong forms, no surrogates,
// nothing above U+10FFFF.
size_t utf8_char_length(std::string_view text, size_t pos, const char* op) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[pos + k]); };
  const unsigned char b0 = byte(0);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 < 0x80) return 1;
  else if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    fail<ValueError>(op, "invalid UTF-8 lead byte 0x{:02X} at byte {}; hint: the text must be UTF-8", b0, pos);
  }
  if (pos + len > text.size())
    fail<ValueError>(op, "truncated UTF-8 sequence at byte {} (needs {} bytes, {} left)", pos, len,
                     text.size() - pos);
  if (byte(1) < lo || byte(1) > hi)
    fail<ValueError>(op, "invalid UTF-8 byte 0x{:02X} at byte {} (after lead byte 0x{:02X})", byte(1),
                     pos + 1, b0);
  for (size_t k = 2; k < len; ++k)
    if (!is_continuation(byte(k)))
      fail<ValueError>(op, "invalid UTF-8 continuation byte 0x{:02X} at byte {}", byte(k), pos + k);
  return len;
}

std::vector<std::string> CharTokenizer::split(std::string_view text) const {
  std::vector<std::string> tokens;
  tokens.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = utf8_char_length(text, i, "CharTokenizer::split");
    tokens.emplace_back(text.substr(i, len));
    i += len;
  }
  return tokens;
}

std::string CharTokenizer::join(const std::vector<std::string>& tokens) const {
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name) {
  if (name == "word" || name == "whitespace") return std::make_unique<WhitespaceTokenizer>();
  if (name == "hyphen") return std::make_unique<HyphenWordTokenizer>();
  if (name == "char") return std::make_unique<CharTokenizer>();
  fail<ValueError>("make_tokenizer", "unknown tokenizer '{}'; hint: use 'word', 'hyphen' or 'char'", name);
}

}  // namespace attograd
