#include "examples/common/number_words.h"

#include <array>
#include <cctype>
#include <optional>

#include <attograd/autograd/error.h>

namespace attograd::app {

namespace {

constexpr std::array<std::string_view, 20> kBelow20 = {
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen",  "seventeen", "eighteen", "nineteen"};
constexpr std::array<std::string_view, 10> kTens = {"",      "",      "twenty",  "thirty", "forty",
                                                    "fifty", "sixty", "seventy", "eighty", "ninety"};

std::string below_100(int64_t n) {
  if (n < 20) return std::string(kBelow20[n]);
  std::string s(kTens[n / 10]);
  if (n % 10) s.append("-").append(kBelow20[n % 10]);
  return s;
}

std::string below_1000(int64_t n) {
  if (n < 100) return below_100(n);
  std::string s(kBelow20[n / 100]);
  s.append(" hundred");
  if (n % 100) s.append(" and ").append(below_100(n % 100));
  return s;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// The integer starting at text[i] ("3485" or "3,485"): its length in bytes and
// its value when the corpus spells it (none when it is too large).
struct DigitRun {
  size_t length;
  std::optional<int64_t> value;
};

// nullopt when text[i] starts no whole number standing alone (glued to a
// letter, a decimal like 3.5, a malformed group like 3,48).

std::optional<DigitRun> digit_run(std::string_view text, size_t i) {
  const bool after_number = i > 1 && (text[i - 1] == '.' || text[i - 1] == ',') && is_digit(text[i - 2]);
  if ((i > 0 && is_alnum(text[i - 1])) || after_number) return std::nullopt;
  size_t j = i;
  while (j < text.size() && is_digit(text[j])) ++j;
  const size_t first_group = j - i;
  auto group_at = [&](size_t k) {  // ",ddd" at k, k + 3 < size
    return text[k] == ',' && is_digit(text[k + 1]) && is_digit(text[k + 2]) &&
           is_digit(text[k + 3]) && (k + 4 == text.size() || !is_digit(text[k + 4]));
  };
  if (first_group <= 3)
    while (j + 3 < text.size() && group_at(j)) j += 4;
  const bool decimal = j + 1 < text.size() && (text[j] == '.' || text[j] == ',') && is_digit(text[j + 1]);
  if ((j < text.size() && is_alnum(text[j])) || decimal) return std::nullopt;
  DigitRun run{j - i, 0};
  for (size_t k = i; k < j && run.value; ++k) {
    if (text[k] == ',') continue;
    run.value = *run.value * 10 + (text[k] - '0');
    if (*run.value > kMaxNumberWords) run.value.reset();
  }
  return run;
}

// Step 1: every integer in range becomes its words; anything else is copied.
std::string spell_digits(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const std::optional<DigitRun> found = is_digit(text[i]) ? digit_run(text, i) : std::nullopt;
    if (!found) {
      out += text[i++];
      continue;
    }
    const std::string_view digits = text.substr(i, found->length);
    i += found->length;
    if (!found->value) {  // too large: the digits without their commas, an unknown word
      for (char c : digits)
        if (c != ',') out += c;
      continue;
    }
    out.append(" ").append(english_number_words(*found->value)).append(" ");
  }
  return out;
}

// Steps 2 and 3: one byte or UTF-8 sequence at a time, to a letter, ' ' or '-'.
std::string fold_case_and_punctuation(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const std::string_view rest = text.substr(i);
    if (rest.starts_with("\u00a0")) {
      out += ' ';
      ++i;
    } else if (rest.starts_with("\u2212") || (rest.starts_with("\xe2\x80") && rest.size() >= 3 &&
                                                static_cast<unsigned char>(rest[2]) >= 0x90 &&
                                                static_cast<unsigned char>(rest[2]) <= 0x94)) {
      out += '-';
      i += 2;
    } else if (c < 0x80 && (std::isspace(c) || (std::ispunct(c) && c != '-'))) {
      out += ' ';
    } else {
      out += static_cast<char>(c < 0x80 ? std::tolower(c) : c);
    }
  }
  return out;
}

// Step 4: one space between words, none at the ends or around a hyphen, one hyphen per run.
std::string squeeze_spaces(std::string_view text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == ' ') {
      space = true;
    } else if (c == '-') {
      if (out.empty() || out.back() != '-') out += '-';
      space = false;
    } else {
      if (space && !out.empty() && out.back() != '-') out += ' ';
      space = false;
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string english_number_words(int64_t n) {
  if (n < 0 || n > kMaxNumberWords)
    fail<ValueError>("english_number_words", "{} is outside [0, {}], the range of the number corpus", n, kMaxNumberWords);
  if (n < 1000) return below_1000(n);
  const int64_t rest = n % 1000;
  std::string s = below_1000(n / 1000);
  s.append(" thousand");
  if (rest > 0) s.append(rest < 100 ? " and " : " ").append(below_1000(rest));
  return s;
}

std::string normalize_number_words(std::string_view text) {
  return squeeze_spaces(fold_case_and_punctuation(spell_digits(text)));
}

}  // namespace attograd::app
