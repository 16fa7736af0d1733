// A real English -> <lang> parallel corpus that every Debian machine carries:
// the gettext catalogs (attograd/data/mo.h) of installed packages, whose messages were
// translated by people. Sources are the English msgids, targets the
// translations; what is not a plain sentence is filtered out, the rest
// deduplicated and split into train/valid/test deterministically, and a
// manifest says what each catalog gave and hashes the result so that two
// machines can tell whether they hold the same corpus.
//
// Catalogs are read from exactly <locale_root>/<language>/LC_MESSAGES/
// <domain>.mo for a fixed list of domains (regional directories such as
// fr_CA are not merged: they vary between machines). By default the domains
// are those of a fixed set of small Debian 12 packages that scripts/setup
// installs, all with fr, de and ko catalogs (gettext_default_domains()).
//
// A message becomes a pair only if it is a plain sentence or phrase; the
// first rule it breaks is counted in the manifest:
//  - plural: it has plural forms. Dropped, not reduced to its first form:
//    which form is the singular depends on the language's Plural-Forms rule
//    (in Arabic msgstr[0] is the form for zero);
//  - untranslated: an empty translation (msgfmt already leaves out fuzzy and
//    untranslated messages; a .mo cannot tell fuzzy ones apart);
//  - encoding: a string that is not valid in the catalog's charset. UTF-8
//    catalogs are validated, ISO-8859-1 ones converted to UTF-8, ASCII ones
//    (and those that name no charset) must hold ASCII only; a catalog in any
//    other charset (EUC-KR, ...) is not read and is listed as such;
//  - identical: the translation is the msgid itself;
//  - control: a control character on either side (a newline or a tab: the
//    multi-line help and usage blocks);
//  - placeholder: '%', '$', '{', '}', '\' or '`' on either side (printf's %s,
//    %1$s, Python's {0} and %(name)s, shell's ${var}, escapes, commands);
//  - markup: '<', '>', '&' or '_' on either side (tags, entities, <file>
//    arguments, GTK's "_Open" mnemonics, identifiers);
//  - usage: a source that starts with '-' or "usage" (any case), or holds '[',
//    ']', '|' or '=' (command syntax: "git log [<options>]", "--color=WHEN");
//  - layout: a space at either end of either side, or two spaces in a row
//    (text laid out in columns);
//  - length: more than kGettextMaxChars code points on either side;
//  - words: a source of fewer than 2 space-separated words (a lone label such
//    as "Open" is translated according to a context the corpus cannot see);
//  - duplicate: a source already paired: the first one is kept, catalogs
//    taken in order of domain name and each in its own (sorted) order.
// Pairs are kept byte for byte, without trimming or Unicode normalization.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <attograd/data/parallel.h>

namespace attograd {

// The longest source or target kept, in code points.
inline constexpr int64_t kGettextMaxChars = 200;

// The rules of the file comment, in the order they are checked.
enum class GettextFilter { plural, untranslated, encoding, identical, control, placeholder, markup, usage, layout,
                           length, words, duplicate };
// The number of GettextFilter values.
inline constexpr int kNumGettextFilters = 12;
// The rule's name as the manifest prints it ("placeholder").
std::string_view gettext_filter_name(GettextFilter filter);

// The rule a pair of UTF-8 strings breaks, from encoding to words (the rules
// about the message, its plural and duplicates, are checked by the reader);
// nullopt for a pair the corpus keeps. `source` and `target` are checked as
// UTF-8 (encoding) and byte for byte.
std::optional<GettextFilter> gettext_sentence_filter(std::string_view source, std::string_view target);

// The default domains: the catalogs of the Debian 12 packages scripts/setup
// installs for this corpus (or that every system has), sorted.
const std::vector<std::string>& gettext_default_domains();

// Where the catalogs are and how the corpus is cut.
struct GettextCorpusOptions {
  std::string locale_root = "/usr/share/locale";  // holds <language>/LC_MESSAGES/<domain>.mo
  std::string language;  // the target language's directory: "fr", "de", "ko", "pt_BR", "sr@latin"
  std::vector<std::string> domains = gettext_default_domains();  // without ".mo"; no two alike
  uint64_t seed = 0;         // chooses which pairs go to valid and test
  int64_t valid_size = 500;  // pairs in valid
  int64_t test_size = 500;   // pairs in test
};

// What became of one domain's catalog.
struct GettextDomainStats {
  // Whether the catalog was read.
  enum class Status { read, missing, unsupported_charset };
  std::string domain;            // "coreutils"
  std::string path;              // <locale_root>/<language>/LC_MESSAGES/<domain>.mo
  Status status = Status::read;  // missing: no such file; unsupported_charset: not UTF-8, ISO-8859-1 or ASCII
  std::string charset;           // as the header names it
  int64_t entries = 0;           // messages in the catalog, header excluded (0 if missing)
  int64_t pairs = 0;             // pairs it gave the corpus, after deduplication
  std::array<int64_t, kNumGettextFilters> dropped{};  // messages dropped, by GettextFilter
};

// A corpus in its three parts, with its manifest.
struct GettextCorpus {
  std::string language;                     // the options' language
  std::string directory;                    // <locale_root>/<language>/LC_MESSAGES
  uint64_t seed = 0;                        // the options' seed
  // Each part is in the corpus's order (pairs sorted by source, bytewise);
  // line_numbers are the 1-based ranks of the pairs in that order.
  ParallelText train;
  ParallelText valid;  // options.valid_size pairs
  ParallelText test;   // options.test_size pairs
  std::vector<GettextDomainStats> domains;  // one per domain asked for, sorted by domain name
  // FNV-1a (64-bit) of every pair as "source\ttarget\n", in the corpus's
  // order: equal on two machines exactly when their pair sets are. The parts
  // are a function of the pairs and the seed, so with equal seeds they agree too.
  uint64_t hash = 0;
  // Pairs in all three parts.
  int64_t size() const { return train.size() + valid.size() + test.size(); }
  // One line per domain (entries read and pairs kept, or why it was not
  // read), one line of the messages dropped by each rule, and a total line
  // (domains, entries, pairs, the sizes of the parts, the seed and the hash).
  std::string manifest_text() const;
};

// Reads the catalogs and builds the corpus. Valid and test are chosen by a
// hash of each pair's source mixed with the seed (the test_size pairs with
// the smallest hashes, then the next valid_size for valid): a pure function
// of the pair set and the seed, and adding a catalog moves only the pairs
// whose hashes fall among the chosen.
// A missing domain's catalog is skipped and listed as missing; a malformed one
// is the IOError of read_mo. IOError (with a hint about scripts/setup and
// dpkg's path-exclude) when the language's directory holds none of the
// catalogs; ValueError when the pairs do not exceed valid_size + test_size
// (train would be empty), for a negative size, for a language or domain that
// is empty or holds a character outside letters, digits and "_-.@" (or is
// "." or ".."), and for an empty domain list or one that names a domain twice.
GettextCorpus load_gettext_corpus(const GettextCorpusOptions& options);

}  // namespace attograd
