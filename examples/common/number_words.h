// English number words as the number corpus writes them (data/numbers,
// tools/make_number_corpus.py): num2words' English with its commas dropped,
// lower case, one space between words, hyphens inside the tens
// ("three thousand four hundred and eighty-five").
//
// normalize_number_words turns what a user types into that form, so training,
// eval and translate read the same text. In order:
//   1. digits become words: 3485 and 3,485 -> "three thousand four hundred and
//      eighty-five" (integers in [0, kMaxNumberWords]; larger ones lose their
//      commas and stay unknown words, as do decimals such as 3.5 and digits
//      glued to letters);
//   2. ASCII letters to lower case;
//   3. every ASCII punctuation mark but the hyphen (, . ; : ! ? ' " ( ) ...) and
//      the no-break space U+00A0 to a space; the Unicode hyphens and dashes
//      U+2010 to U+2014 and the minus sign U+2212 to '-';
//   4. runs of whitespace to one space, none at either end or around a
//      hyphen, and runs of hyphens to one.
// "Three thousand, four hundred and eighty-five." and
// "  THREE THOUSAND FOUR HUNDRED AND EIGHTY - FIVE" both give the corpus form;
// text already in that form comes back unchanged.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace attograd::app {

// The largest integer of the corpus (data/numbers covers [0, 999,999]).
inline constexpr int64_t kMaxNumberWords = 999'999;

// n in [0, kMaxNumberWords] as the corpus spells it: 0 "zero", 21 "twenty-one",
// 105 "one hundred and five", 3485 "three thousand four hundred and eighty-five",
// 288006 "two hundred and eighty-eight thousand and six". ValueError outside the range.
std::string english_number_words(int64_t n);

// text in the corpus's form (the rules above); any string is accepted.
std::string normalize_number_words(std::string_view text);

}  // namespace attograd::app
