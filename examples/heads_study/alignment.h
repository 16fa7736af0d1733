// Gold alignments and roles for the number corpus, made by program from the
// integer in its first column (experiment 5 of the heads study): the English
// source and the French or German target are spelled again from the number,
// piece by piece, and every piece knows which part of the quantity it says.
// A target token is aligned with the source tokens that say the same part.
//
// Shape legend: S source tokens (English words and hyphens, then <eos>),
// T target tokens (fr: words and hyphens as HyphenWordTokenizer splits them;
// de: characters, as CharTokenizer splits them; then <eos>).
//
// "seventy-one" -> "soixante et onze": soixante says 60 of the 70, so it is
// aligned with `seventy`; onze says 10 + 1, so it is aligned with `seventy`
// and `one`; et is a connector, aligned with the hyphen. German
// "einundsiebzig": e, i, n with `one`, u, n, d with the hyphen, s..g with
// `seventy`.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attograd::app::heads {

// What a target token says. A token may have several roles: "onze" in 71 is
// units, tens and sixty_plus; "vingt" in 25,000 is tens and thousands_group.
enum class Role : uint8_t {
  units,            // 1-9 below the tens (and "un"/"ein"), also zero
  teen,             // 10-19 said as one English word (fr dix-sept, de siebzehn)
  tens,             // the tens word, and each part of fr 70-99 that says tens
  hundreds,         // the hundreds digit and cent/hundert
  thousand_word,    // mille / tausend
  thousands_group,  // any part of the multiplier of mille / tausend
  sixty_plus,       // fr 70-79, said as 60 + 10..19 (71 = soixante et onze)
  four_twenty,      // fr 80-99, said as 4 x 20 (+ 1..19): quatre-vingt-onze
  connector,        // hyphens, et, und: only glue; no other role
  eos,              // the end of the sentence
};
inline constexpr int kRoleCount = 10;
const char* role_name(Role r);

struct AlignedToken {
  std::string text;
  uint32_t roles = 0;            // bit (1 << Role)
  std::vector<int64_t> sources;  // the gold source positions, ascending
  bool has(Role r) const { return (roles >> static_cast<int>(r)) & 1u; }
};

struct AlignedSentence {
  int64_t number = 0;
  std::string lang;
  std::vector<std::string> source;   // [S]: English tokens, then "<eos>"
  std::vector<AlignedToken> target;  // [T]: target tokens, then "<eos>"
};

// Whether align_number knows the language's spelling: fr and de.
bool has_gold_alignments(std::string_view lang);

// The number (in [0, 999,999]) spelled in English and in lang ("fr" or "de"),
// as the corpus writes them, with every target token's roles and gold source
// positions. ValueError for another language or a number out of range.
AlignedSentence align_number(int64_t number, const std::string& lang);

// The sentence's tokens joined back: the English text and the target text as
// the corpus writes them (to check align_number against a TSV row).
std::string source_text(const AlignedSentence& s);
std::string target_text(const AlignedSentence& s);

}  // namespace attograd::app::heads
