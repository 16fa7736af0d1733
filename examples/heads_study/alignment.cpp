#include "examples/heads_study/alignment.h"

#include <algorithm>
#include <array>
#include <set>

#include <attograd/autograd/error.h>
#include "examples/common/number_words.h"
#include <attograd/data/parallel.h>
#include <attograd/data/tokenizer.h>

namespace attograd::app::heads {

namespace {

// Which part of the quantity a source token says, within its group of three
// digits (0: below 1000, 1: the multiplier of "thousand").
enum class Slot : uint8_t { zero, units, teen, tens, hyphen, and_word, hundreds_digit, hundred_word, thousand_word, eos };
struct Key {
  int group = 0;
  Slot slot = Slot::units;
  auto operator<=>(const Key&) const = default;
};

struct SourceToken {
  std::string text;
  Key key;
};

// A target piece: one fr token, or a run of de characters.
struct Piece {
  std::string text;
  std::set<Key> keys;
  uint32_t extra = 0;  // roles not implied by the keys (sixty_plus, four_twenty)
  bool connector = false;
};

uint32_t bit(Role r) { return 1u << static_cast<int>(r); }

constexpr std::array<const char*, 20> kEnglishBelow20 = {
    "zero",    "one",     "two",       "three",    "four",     "five",    "six",
    "seven",   "eight",   "nine",      "ten",      "eleven",   "twelve",  "thirteen",
    "fourteen", "fifteen", "sixteen",  "seventeen", "eighteen", "nineteen"};
constexpr std::array<const char*, 10> kEnglishTens = {"",      "",      "twenty",  "thirty", "forty",
                                                      "fifty", "sixty", "seventy", "eighty", "ninety"};

// English as english_number_words spells it (examples/common/number_words.cpp), split as
// HyphenWordTokenizer splits it.
void english_below_100(int g, int64_t n, std::vector<SourceToken>& out) {
  if (n < 10) {
    out.push_back({kEnglishBelow20[n], {g, n == 0 ? Slot::zero : Slot::units}});
  } else if (n < 20) {
    out.push_back({kEnglishBelow20[n], {g, Slot::teen}});
  } else {
    out.push_back({kEnglishTens[n / 10], {g, Slot::tens}});
    if (n % 10) {
      out.push_back({"-", {g, Slot::hyphen}});
      out.push_back({kEnglishBelow20[n % 10], {g, Slot::units}});
    }
  }
}

void english_below_1000(int g, int64_t n, std::vector<SourceToken>& out) {
  if (n < 100) return english_below_100(g, n, out);
  out.push_back({kEnglishBelow20[n / 100], {g, Slot::hundreds_digit}});
  out.push_back({"hundred", {g, Slot::hundred_word}});
  if (n % 100 == 0) return;
  out.push_back({"and", {g, Slot::and_word}});
  english_below_100(g, n % 100, out);
}

std::vector<SourceToken> english(int64_t n) {
  std::vector<SourceToken> out;
  if (n < 1000) {
    english_below_1000(0, n, out);
  } else {
    english_below_1000(1, n / 1000, out);
    out.push_back({"thousand", {1, Slot::thousand_word}});
    const int64_t rest = n % 1000;
    if (rest > 0 && rest < 100) out.push_back({"and", {0, Slot::and_word}});
    if (rest > 0) english_below_1000(0, rest, out);
  }
  out.push_back({"<eos>", {0, Slot::eos}});
  return out;
}

// French as num2words spells it in the corpus: "vingt et un", "soixante et
// onze", "quatre-vingts" (the s only at the end of the number), "deux cents"
// (likewise), "mille" alone for 1000.
constexpr std::array<const char*, 17> kFrenchBelow17 = {"zéro", "un",   "deux",   "trois",    "quatre", "cinq",
                                                        "six",  "sept", "huit",   "neuf",     "dix",    "onze",
                                                        "douze", "treize", "quatorze", "quinze", "seize"};
constexpr std::array<const char*, 7> kFrenchTens = {"", "", "vingt", "trente", "quarante", "cinquante", "soixante"};

// x in [10, 19] after soixante or quatre-vingt: the tens part of the whole
// number continues into it.
void french_after_tens(int g, int64_t x, uint32_t extra, std::vector<Piece>& out) {
  const Key tens{g, Slot::tens}, units{g, Slot::units}, hyphen{g, Slot::hyphen};
  if (x == 10) {
    out.push_back({"-", {tens}, extra, true});
    out.push_back({"dix", {tens}, extra});
  } else if (x < 17) {
    out.push_back({"-", {hyphen}, extra, true});
    out.push_back({kFrenchBelow17[x], {tens, units}, extra});
  } else {
    out.push_back({"-", {tens}, extra, true});
    out.push_back({"dix", {tens}, extra});
    out.push_back({"-", {hyphen}, extra, true});
    out.push_back({kFrenchBelow17[x - 10], {units}, extra});
  }
}

void french_below_100(int g, int64_t n, bool last, std::vector<Piece>& out) {
  const Key tens{g, Slot::tens}, units{g, Slot::units}, teen{g, Slot::teen}, hyphen{g, Slot::hyphen};
  if (n < 10) {
    out.push_back({kFrenchBelow17[n], {Key{g, n == 0 ? Slot::zero : Slot::units}}});
  } else if (n < 17) {
    out.push_back({kFrenchBelow17[n], {teen}});
  } else if (n < 20) {
    out.push_back({"dix", {teen}});
    out.push_back({"-", {teen}, 0, true});
    out.push_back({kFrenchBelow17[n - 10], {teen}});
  } else if (n < 70) {
    out.push_back({kFrenchTens[n / 10], {tens}});
    if (n % 10 == 1) {
      out.push_back({"et", {hyphen}, 0, true});
      out.push_back({"un", {units}});
    } else if (n % 10) {
      out.push_back({"-", {hyphen}, 0, true});
      out.push_back({kFrenchBelow17[n % 10], {units}});
    }
  } else if (n < 80) {
    const uint32_t extra = bit(Role::sixty_plus);
    out.push_back({"soixante", {tens}, extra});
    if (n == 71) {
      out.push_back({"et", {hyphen}, extra, true});
      out.push_back({"onze", {tens, units}, extra});
    } else {
      french_after_tens(g, n - 60, extra, out);
    }
  } else {
    const uint32_t extra = bit(Role::four_twenty);
    out.push_back({"quatre", {tens}, extra});
    out.push_back({"-", {tens}, extra, true});
    out.push_back({n == 80 && last ? "vingts" : "vingt", {tens}, extra});
    const int64_t x = n - 80;
    if (x >= 10) {
      french_after_tens(g, x, extra, out);
    } else if (x > 0) {
      out.push_back({"-", {hyphen}, extra, true});
      out.push_back({kFrenchBelow17[x], {units}, extra});
    }
  }
}

// One group in [1, 999]; `last`: nothing follows it (no mille), so cents and vingts take their s.
void french_group(int g, int64_t n, bool last, std::vector<Piece>& out) {
  const int64_t h = n / 100, r = n % 100;
  const Key digit{g, Slot::hundreds_digit}, word{g, Slot::hundred_word};
  if (h == 1) {
    out.push_back({"cent", {digit, word}});
  } else if (h > 1) {
    out.push_back({kFrenchBelow17[h], {digit}});
    out.push_back({r == 0 && last ? "cents" : "cent", {word}});
  }
  if (r > 0) french_below_100(g, r, last, out);
}

std::vector<Piece> french(int64_t n) {
  std::vector<Piece> out;
  if (n == 0) {
    french_below_100(0, 0, true, out);
    return out;
  }
  const int64_t thousands = n / 1000, rest = n % 1000;
  if (thousands == 1) {
    out.push_back({"mille", {Key{1, Slot::units}, Key{1, Slot::thousand_word}}});
  } else if (thousands > 1) {
    french_group(1, thousands, false, out);
    out.push_back({"mille", {Key{1, Slot::thousand_word}}});
  }
  if (rest > 0) french_group(0, rest, true, out);
  return out;
}

// German as num2words spells it in the corpus: one compound, "eins" for a
// final 1 (einhunderteins, and einstausend for 1000 x 101), "ein" before
// hundert, und, tausend.
constexpr std::array<const char*, 13> kGermanBelow13 = {"null", "eins", "zwei", "drei", "vier",  "fünf", "sechs",
                                                        "sieben", "acht", "neun", "zehn", "elf", "zwölf"};
constexpr std::array<const char*, 10> kGermanTeenStem = {"", "", "", "drei", "vier", "fünf", "sech", "sieb", "acht", "neun"};
constexpr std::array<const char*, 10> kGermanTens = {"",        "",         "zwanzig", "dreißig", "vierzig",
                                                     "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"};

std::string german_digit(int64_t d) { return d == 1 ? "ein" : kGermanBelow13[d]; }

void german_group(int g, int64_t n, bool alone_one, std::vector<Piece>& out) {
  const int64_t h = n / 100, r = n % 100;
  if (h > 0) {
    out.push_back({german_digit(h), {Key{g, Slot::hundreds_digit}}});
    out.push_back({"hundert", {Key{g, Slot::hundred_word}}});
  }
  if (r == 0 && n > 0) return;
  if (r < 10) {
    const bool ein = r == 1 && alone_one && h == 0;
    out.push_back({ein ? "ein" : kGermanBelow13[r], {Key{g, r == 0 ? Slot::zero : Slot::units}}});
  } else if (r < 13) {
    out.push_back({kGermanBelow13[r], {Key{g, Slot::teen}}});
  } else if (r < 20) {
    out.push_back({std::string(kGermanTeenStem[r - 10]) + "zehn", {Key{g, Slot::teen}}});
  } else {
    if (r % 10) {
      out.push_back({german_digit(r % 10), {Key{g, Slot::units}}});
      out.push_back({"und", {Key{g, Slot::hyphen}}, 0, true});
    }
    out.push_back({kGermanTens[r / 10], {Key{g, Slot::tens}}});
  }
}

std::vector<Piece> german(int64_t n) {
  std::vector<Piece> out;
  const int64_t thousands = n / 1000, rest = n % 1000;
  if (thousands > 0) {
    german_group(1, thousands, true, out);
    out.push_back({"tausend", {Key{1, Slot::thousand_word}}});
  }
  if (rest > 0 || n == 0) german_group(0, rest, false, out);
  return out;
}

uint32_t roles_of(const Piece& p) {
  if (p.connector) return bit(Role::connector);
  uint32_t roles = p.extra;
  for (const Key& k : p.keys) {
    switch (k.slot) {
      case Slot::zero:
      case Slot::units: roles |= bit(Role::units); break;
      case Slot::teen: roles |= bit(Role::teen); break;
      case Slot::tens: roles |= bit(Role::tens); break;
      case Slot::hundreds_digit:
      case Slot::hundred_word: roles |= bit(Role::hundreds); break;
      case Slot::thousand_word: roles |= bit(Role::thousand_word); break;
      case Slot::eos: roles |= bit(Role::eos); break;
      case Slot::hyphen:
      case Slot::and_word: roles |= bit(Role::connector); break;
    }
    if (k.group == 1 && k.slot != Slot::thousand_word) roles |= bit(Role::thousands_group);
  }
  return roles;
}

}  // namespace

const char* role_name(Role r) {
  static constexpr std::array<const char*, kRoleCount> names = {
      "units", "teen", "tens", "hundreds", "thousand_word", "thousands_group", "sixty_plus", "four_twenty",
      "connector", "eos"};
  return names[static_cast<size_t>(r)];
}

bool has_gold_alignments(std::string_view lang) { return lang == "fr" || lang == "de"; }

AlignedSentence align_number(int64_t number, const std::string& lang) {
  if (number < 0 || number > kMaxNumberWords)
    fail<ValueError>("align_number", "{} is outside [0, {}], the range of the number corpus", number, kMaxNumberWords);
  if (!has_gold_alignments(lang))
    fail<ValueError>("align_number", "gold alignments exist for fr and de, got '{}'; hint: --langs fr,de", lang);
  const std::vector<SourceToken> src = english(number);
  std::vector<Piece> pieces = lang == "fr" ? french(number) : german(number);
  pieces.push_back({"<eos>", {Key{0, Slot::eos}}});

  AlignedSentence s;
  s.number = number;
  s.lang = lang;
  for (const SourceToken& t : src) s.source.push_back(t.text);
  for (const Piece& p : pieces) {
    AlignedToken tok;
    tok.roles = roles_of(p);
    for (size_t i = 0; i < src.size(); ++i)
      if (p.keys.contains(src[i].key)) tok.sources.push_back(static_cast<int64_t>(i));
    const bool chars = lang == "de" && p.text != "<eos>";
    for (size_t at = 0; at < p.text.size();) {
      const size_t len = chars ? utf8_char_length(p.text, at, "align_number") : p.text.size();
      tok.text = p.text.substr(at, len);
      s.target.push_back(tok);
      at += len;
    }
  }
  return s;
}

std::string source_text(const AlignedSentence& s) {
  const std::vector<std::string> words(s.source.begin(), s.source.end() - 1);
  return make_tokenizer(kNumberSourceTokenizer)->join(words);
}

std::string target_text(const AlignedSentence& s) {
  std::vector<std::string> tokens;
  for (size_t i = 0; i + 1 < s.target.size(); ++i) tokens.push_back(s.target[i].text);
  return make_tokenizer(number_target_tokenizer(s.lang))->join(tokens);
}

}  // namespace attograd::app::heads
