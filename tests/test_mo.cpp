// GNU gettext .mo catalogs (attograd/data/mo.h) and the parallel corpus built from
// them (attograd/data/gettext_corpus.h): catalogs assembled here byte by byte, in both
// byte orders and in every malformed way the reader must refuse; corpora read
// from a locale tree made here; and the machine's own /usr/share/locale when
// its catalogs are installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/data/gettext_corpus.h>
#include <attograd/data/mo.h>
#include "fuzz/mo_target.h"
#include "test_util.h"

using namespace attograd;
using attograd::testing::contains;
using attograd::testing::error_message;
using attograd::testing::expect_error;
using attograd::testing::TempDir;
using attograd::testing::write_text;

namespace {

namespace fs = std::filesystem;

// ---- assembling .mo bytes ------------------------------------------------------

void put_u32(std::string& b, size_t offset, uint32_t v, bool big_endian) {
  for (int i = 0; i < 4; ++i) {
    const int shift = big_endian ? 8 * (3 - i) : 8 * i;
    b[offset + static_cast<size_t>(i)] = static_cast<char>((v >> shift) & 0xff);
  }
}

// (original, translation) pairs in file order: an original is "msgid",
// "msgid\0plural" or "context\x04msgid"; "" with the header text is the header.
using Messages = std::vector<std::pair<std::string, std::string>>;

// Layout: the 28-byte header, the originals' table at 28, the translations'
// at 28 + 8N, then every string with its NUL; no hash table.
std::string build_mo(const Messages& messages, bool big_endian = false, uint32_t revision = 0) {
  const auto n = static_cast<uint32_t>(messages.size());
  const uint32_t originals = 28, translations = 28 + 8 * n;
  std::string b(28 + 16 * n, '\0');
  put_u32(b, 0, 0x950412de, big_endian);
  put_u32(b, 4, revision, big_endian);
  put_u32(b, 8, n, big_endian);
  put_u32(b, 12, originals, big_endian);
  put_u32(b, 16, translations, big_endian);
  put_u32(b, 24, static_cast<uint32_t>(b.size()), big_endian);  // hash table: size 0, offset past the tables
  const auto add = [&](uint32_t table, uint32_t i, const std::string& s) {
    put_u32(b, table + 8 * i, static_cast<uint32_t>(s.size()), big_endian);
    put_u32(b, table + 8 * i + 4, static_cast<uint32_t>(b.size()), big_endian);
    b += s;
    b.push_back('\0');
  };
  for (uint32_t i = 0; i < n; ++i) add(originals, i, messages[i].first);
  for (uint32_t i = 0; i < n; ++i) add(translations, i, messages[i].second);
  return b;
}

const std::string kUtf8Header = "Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n > 1);\n";

Messages sample_messages() {
  using namespace std::string_literals;
  return {{"", kUtf8Header},
          {"Open the window", "Ouvrir la fenêtre"},
          {"menu\x04Quit", "Quitter"},
          {"one file\0many files"s, "un fichier\0des fichiers"s}};
}

// ---- the reader ----------------------------------------------------------------------

TEST(Mo, ReadsMessagesContextsPluralsAndTheHeaderInBothByteOrders) {
  for (const bool big : {false, true}) {
    SCOPED_TRACE(big ? "big-endian" : "little-endian");
    const MoCatalog c = parse_mo(build_mo(sample_messages(), big), "x.mo");
    EXPECT_EQ(c.header, kUtf8Header);
    EXPECT_EQ(c.charset, "UTF-8");
    ASSERT_EQ(c.entries.size(), 3u);  // the header is not an entry
    EXPECT_EQ(c.entries[0].context, "");
    EXPECT_EQ(c.entries[0].msgid, "Open the window");
    EXPECT_FALSE(c.entries[0].has_plural());
    EXPECT_EQ(c.entries[0].msgstr, (std::vector<std::string>{"Ouvrir la fenêtre"}));
    EXPECT_EQ(c.entries[1].context, "menu");
    EXPECT_EQ(c.entries[1].msgid, "Quit");
    EXPECT_EQ(c.entries[1].msgstr, (std::vector<std::string>{"Quitter"}));
    EXPECT_EQ(c.entries[2].msgid, "one file");
    EXPECT_EQ(c.entries[2].msgid_plural, "many files");
    EXPECT_TRUE(c.entries[2].has_plural());
    EXPECT_EQ(c.entries[2].msgstr, (std::vector<std::string>{"un fichier", "des fichiers"}));
  }
}

// The context separator is looked for before the plural only (the fuzzer's
// fuzz/regressions/mo/plural-holds-context-separator.mo: a 0x04 in a plural
// once made a context holding a NUL).
TEST(Mo, ContextIsInTheSingularOnly) {
  using namespace std::string_literals;
  const MoCatalog c = parse_mo(build_mo({{"one file\0many\x04files"s, "a\0b"s}, {"ctx\x04one\0two"s, "x\0y"s}}));
  ASSERT_EQ(c.entries.size(), 2u);
  EXPECT_EQ(c.entries[0].context, "");
  EXPECT_EQ(c.entries[0].msgid, "one file");
  EXPECT_EQ(c.entries[0].msgid_plural, "many\x04files");
  EXPECT_EQ(c.entries[1].context, "ctx");
  EXPECT_EQ(c.entries[1].msgid, "one");
  EXPECT_EQ(c.entries[1].msgid_plural, "two");
}

TEST(Mo, HeaderCharsetAsWrittenOrEmpty) {
  const auto charset = [](const Messages& m) { return parse_mo(build_mo(m)).charset; };
  EXPECT_EQ(charset({{"", "Project-Id-Version: x\nContent-Type: text/plain; charset=ISO-8859-1\n"}}), "ISO-8859-1");
  EXPECT_EQ(charset({{"", "Content-Type: text/plain; charset=utf-8; format=flowed\n"}}), "utf-8");
  EXPECT_EQ(charset({{"", "Content-Type: text/plain\n"}}), "");
  EXPECT_EQ(charset({{"a b", "c d"}}), "");  // no header at all
  EXPECT_EQ(parse_mo(build_mo({})).entries.size(), 0u);  // an empty catalog is a catalog
}

TEST(Mo, AcceptsMajorRevisionsZeroAndOneOnly) {
  EXPECT_EQ(parse_mo(build_mo(sample_messages(), false, 0x00010001)).entries.size(), 3u);  // revision 1.1
  expect_error<IOError>([] { parse_mo(build_mo(sample_messages(), true, 0x00020000), "new.mo"); },
                        {"new.mo", "revision 2.0"});
}

// One malformed catalog and the words its error must hold.
struct BadCase {
  std::string what;
  std::string bytes;
  std::vector<std::string> expect;
};

std::vector<BadCase> bad_cases() {
  const std::string good = build_mo(sample_messages());
  std::vector<BadCase> cases;
  const auto patched = [&](size_t offset, uint32_t v) {
    std::string b = good;
    put_u32(b, offset, v, false);
    return b;
  };
  cases.push_back({"empty", "", {"too short"}});
  cases.push_back({"3 bytes", good.substr(0, 3), {"too short"}});
  cases.push_back({"a .po text", "msgid \"\"\nmsgstr \"\"\n", {"not a .mo catalog", "msgfmt"}});
  cases.push_back({"random bytes", std::string(64, '\x7f'), {"not a .mo catalog", "0x7f7f7f7f"}});
  cases.push_back({"truncated header", good.substr(0, 20), {"shorter than a .mo header", "truncated"}});
  cases.push_back({"truncated tables", good.substr(0, 40), {"table of originals", "past the end"}});
  cases.push_back({"truncated strings", good.substr(0, good.size() - 5), {"translation string 3", "past the end"}});
  // N = 2^32 - 1: N * 8 wraps a 32-bit product to a small number.
  cases.push_back({"N * 8 overflowing", patched(8, 0xffffffff), {"4294967295 strings", "past the end"}});
  cases.push_back({"N * 8 wrapping to 0", patched(8, 0x20000000), {"536870912 strings", "past the end"}});
  cases.push_back({"translations' table past the end", patched(16, 0xfffffff0), {"table of translations"}});
  cases.push_back({"string offset past the end", patched(28 + 4, 0xffffff00), {"original string 0", "past the end"}});
  cases.push_back({"string length past the end", patched(28, 0xffffffff), {"original string 0", "past the end"}});
  {  // the header's NUL replaced: the string runs into the next one
    std::string b = good;
    b[b.find("Open the window") - 1] = 'x';
    cases.push_back({"missing NUL", b, {"original string 0", "not followed by a NUL"}});
  }
  {  // every translation pointing at the one long string: 20 x 2000 bytes from a file of 2.5 kB
    Messages m;
    for (int i = 0; i < 20; ++i) m.push_back({fmt::format("message {}", i), i == 19 ? std::string(2000, 'x') : "y"});
    std::string b = build_mo(m);
    const auto long_string = static_cast<uint32_t>(b.size() - 2001);
    for (uint32_t i = 0; i < 20; ++i) {
      put_u32(b, 28 + 20 * 8 + 8 * i, 2000, false);
      put_u32(b, 28 + 20 * 8 + 8 * i + 4, long_string, false);
    }
    cases.push_back({"overlapping strings", b, {"overlap", "crafted"}});
  }
  cases.push_back(
      {"three-part original", build_mo({{std::string("a\0b\0c", 5), "x"}}), {"original string 0", "more than two"}});
  cases.push_back({"two headers", build_mo({{"", kUtf8Header}, {"", kUtf8Header}}), {"entry 1", "second header"}});
  return cases;
}

TEST(Mo, MalformedCatalogsAreIOErrorsNamingTheFileAndWhere) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.what);
    const std::string msg = error_message<IOError>([&] { parse_mo(c.bytes, "dir/bad.mo"); });
    ASSERT_NE(msg, "") << "accepted";
    EXPECT_TRUE(contains(msg, "dir/bad.mo")) << msg;
    for (const std::string& e : c.expect) EXPECT_TRUE(contains(msg, e)) << "'" << e << "' not in: " << msg;
    EXPECT_NO_THROW(fuzz::mo(c.bytes));  // the fuzz target takes the same refusal as bad input
  }
}

TEST(Mo, ReadMoNamesThePath) {
  TempDir dir("mo");
  const std::string path = dir / "fr.mo";
  write_text(path, build_mo(sample_messages(), true));
  EXPECT_EQ(read_mo(path).entries.size(), 3u);
  write_text(dir / "notes.txt", "These are notes, not a catalog.\n");
  expect_error<IOError>([&] { read_mo(dir / "notes.txt"); }, {dir / "notes.txt", "not a .mo catalog", "msgfmt"});
  expect_error<IOError>([&] { read_mo(dir / "absent.mo"); }, {dir / "absent.mo"});
  expect_error<IOError>([&] { read_mo(dir.path); }, {dir.path});  // a directory
}

// The seeds of the fuzz target parse (the two byte orders alike) or are refused,
// and every file there passes the target's checks.
TEST(Mo, FuzzSeedsPassTheTarget) {
  const fs::path seeds = fs::path(ATTOGRAD_SOURCE_DIR) / "fuzz/corpus/mo";
  int n = 0;
  for (const auto& e : fs::directory_iterator(seeds)) {
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(fuzz::mo(read_file_bytes(e.path().string())));
    ++n;
  }
  EXPECT_GE(n, 3);
  const MoCatalog little = read_mo((seeds / "little-endian.mo").string());
  const MoCatalog big = read_mo((seeds / "big-endian.mo").string());
  ASSERT_EQ(little.entries.size(), 3u);
  ASSERT_EQ(big.entries.size(), little.entries.size());
  for (size_t i = 0; i < little.entries.size(); ++i) {
    EXPECT_EQ(big.entries[i].context, little.entries[i].context);
    EXPECT_EQ(big.entries[i].msgid, little.entries[i].msgid);
    EXPECT_EQ(big.entries[i].msgstr, little.entries[i].msgstr);
  }
  const fs::path regressions = fs::path(ATTOGRAD_SOURCE_DIR) / "fuzz/regressions/mo";
  if (fs::is_directory(regressions)) {
    for (const auto& e : fs::directory_iterator(regressions)) {
      EXPECT_NO_THROW(fuzz::mo(read_file_bytes(e.path().string()))) << e.path();
    }
  }
}

// ---- the sentence filter ----------------------------------------------------------------

TEST(GettextFilter, KeepsSentencesAndNamesTheFirstRuleBroken) {
  using F = GettextFilter;
  const std::vector<std::tuple<std::string, std::string, std::optional<F>>> cases = {
      {"Open the window", "Ouvrir la fenêtre", std::nullopt},
      {"Save changes?", "저장할까요?", std::nullopt},  // a one-word target is fine: words count the source
      {"bad\xff byte", "x y", F::encoding},
      {"a b", "c\xe2\x82", F::encoding},  // truncated UTF-8
      {"Same text", "Same text", F::identical},
      {"two\nlines", "deux\nlignes", F::control},
      {"a\ttab", "une tab", F::control},
      {"C1 control", "contr\xc2\x85le", F::control},
      {"cannot open %s", "impossible d'ouvrir %s", F::placeholder},
      {"cannot open file", "impossible d'ouvrir %1$s", F::placeholder},
      {"value {0} here", "valeur {0} ici", F::placeholder},
      {"set ${HOME} now", "mettre ${HOME}", F::placeholder},
      {"run `ls` now", "lancer `ls`", F::placeholder},
      {"a <b>bold</b> word", "un mot <b>gras</b>", F::markup},
      {"Tom & Jerry", "Tom &amp; Jerry", F::markup},
      {"_Open file", "_Ouvrir le fichier", F::markup},
      {"-v, verbose output", "-v, sortie bavarde", F::usage},
      {"Usage: ls FILE", "Utilisation : ls FICHIER", F::usage},
      {"list files [all]", "lister les fichiers [tout]", F::usage},
      {"color is WHEN=always", "couleur est QUAND=toujours", F::usage},
      {" leading space", " espace", F::layout},
      {"trailing space here", "espace final ", F::layout},
      {"two  spaces", "deux  espaces", F::layout},
      {"a " + std::string(200, 'b'), "c d", F::length},
      {"a b", "c " + std::string(200, 'd'), F::length},
      {"Open", "Ouvrir", F::words},
  };
  for (const auto& [source, target, want] : cases) {
    SCOPED_TRACE(source);
    const std::optional<F> got = gettext_sentence_filter(source, target);
    EXPECT_EQ(got.has_value(), want.has_value()) << (got ? gettext_filter_name(*got) : "kept");
    if (got && want) {
      EXPECT_EQ(gettext_filter_name(*got), gettext_filter_name(*want));
    }
  }
  // 200 code points of 2 bytes each fit; the bound counts characters, not bytes.
  std::string accents;
  for (int i = 0; i < 98; ++i) accents += "é";
  EXPECT_EQ(gettext_sentence_filter("a b", "é " + accents + " " + accents), std::nullopt);
}

// ---- the corpus --------------------------------------------------------------------------

// A locale tree root/<lang>/LC_MESSAGES/<domain>.mo written by the test.
struct LocaleTree {
  TempDir dir{"gettext"};
  void add(const std::string& lang, const std::string& domain, const std::string& bytes) {
    const fs::path d = fs::path(dir.path) / lang / "LC_MESSAGES";
    fs::create_directories(d);
    write_text((d / (domain + ".mo")).string(), bytes);
  }
};

// n plain sentence pairs, numbered from `first`.
Messages sentences(int first, int n) {
  Messages m{{"", kUtf8Header}};
  for (int i = first; i < first + n; ++i)
    m.push_back({fmt::format("The sentence number {} is plain", i), fmt::format("La phrase numéro {} est simple", i)});
  return m;
}

// Pairs of the three parts, as (source, target).
std::set<std::pair<std::string, std::string>> pairs_of(const ParallelText& t) {
  std::set<std::pair<std::string, std::string>> s;
  for (size_t i = 0; i < t.sources.size(); ++i) s.emplace(t.sources[i], t.targets[i]);
  return s;
}

std::set<std::pair<std::string, std::string>> all_pairs(const GettextCorpus& c) {
  auto s = pairs_of(c.train);
  for (const ParallelText* t : {&c.valid, &c.test}) s.merge(pairs_of(*t));
  return s;
}

// The hash as documented, computed here on its own.
uint64_t documented_hash(const std::set<std::pair<std::string, std::string>>& pairs) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const auto& [s, t] : pairs)
    for (char c : s + "\t" + t + "\n") h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// A tree in which every rule drops something: "beta" (read first, by name)
// has the sentences, a plural, each kind of non-sentence and a duplicate;
// "alpha" repeats one of beta's sources with another translation; "latin" is
// ISO-8859-1; "korean" is EUC-KR (not read); "absent" has no file.
struct Fixture {
  LocaleTree tree;
  GettextCorpusOptions options;
  Fixture() {
    using namespace std::string_literals;
    Messages beta = sentences(0, 40);
    beta.push_back({"one file\0many files"s, "un fichier\0des fichiers"s});
    beta.push_back({"Untranslated thing here", ""});
    beta.push_back({"Same words here", "Same words here"});
    beta.push_back({"cannot open %s", "impossible d'ouvrir %s"});
    beta.push_back({"Usage: ls FILE", "Utilisation : ls FICHIER"});
    beta.push_back({"Open", "Ouvrir"});
    beta.push_back({"ctx\x04The sentence number 3 is plain", "Une autre traduction"});  // duplicate within beta
    tree.add("fr", "beta", build_mo(beta));
    tree.add("fr", "alpha", build_mo({{"", kUtf8Header},
                                      {"The sentence number 5 is plain", "Traduction d'alpha"},
                                      {"Alpha has its own sentence", "Alpha a sa propre phrase"}},
                                     true));
    tree.add("fr", "latin", build_mo({{"", "Content-Type: text/plain; charset=ISO-8859-1\n"},
                                      {"A latin sentence here", "Une phrase latine \xe9t\xe9"}}));
    tree.add("fr", "korean", build_mo({{"", "Content-Type: text/plain; charset=EUC-KR\n"}, {"Some text", "\xc7\xd1"}}));
    options.locale_root = tree.dir.path;
    options.language = "fr";
    options.domains = {"beta", "latin", "alpha", "korean", "absent"};
    options.valid_size = 5;
    options.test_size = 7;
  }
  const GettextDomainStats& stats(const GettextCorpus& c, const std::string& domain) const {
    for (const GettextDomainStats& d : c.domains)
      if (d.domain == domain) return d;
    throw std::runtime_error("no domain " + domain);
  }
};

TEST(GettextCorpus, FiltersDedupesAndConvertsEachCatalog) {
  Fixture f;
  const GettextCorpus c = load_gettext_corpus(f.options);
  const auto pairs = all_pairs(c);
  // alpha's two (one of them beats beta's sentence 5, alpha coming first by
  // name), beta's other 39 sentences, latin's one converted to UTF-8.
  EXPECT_EQ(c.size(), 42);
  EXPECT_EQ(pairs.size(), 42u);
  EXPECT_TRUE(pairs.count({"The sentence number 5 is plain", "Traduction d'alpha"}));
  EXPECT_FALSE(pairs.count({"The sentence number 5 is plain", "La phrase numéro 5 est simple"}));
  // Of beta's two translations of sentence 3, the first in file order.
  EXPECT_TRUE(pairs.count({"The sentence number 3 is plain", "La phrase numéro 3 est simple"}));
  EXPECT_TRUE(pairs.count({"A latin sentence here", "Une phrase latine été"}));
  for (const auto& [s, t] : pairs) EXPECT_EQ(gettext_sentence_filter(s, t), std::nullopt) << s;

  ASSERT_EQ(c.domains.size(), 5u);  // sorted by name
  EXPECT_EQ(c.domains.front().domain, "absent");
  EXPECT_EQ(c.domains.back().domain, "latin");
  const GettextDomainStats& beta = f.stats(c, "beta");
  EXPECT_EQ(beta.entries, 47);
  EXPECT_EQ(beta.pairs, 39);
  const auto dropped = [&](GettextFilter r) { return beta.dropped[static_cast<size_t>(r)]; };
  EXPECT_EQ(dropped(GettextFilter::plural), 1);
  EXPECT_EQ(dropped(GettextFilter::untranslated), 1);
  EXPECT_EQ(dropped(GettextFilter::identical), 1);
  EXPECT_EQ(dropped(GettextFilter::placeholder), 1);
  EXPECT_EQ(dropped(GettextFilter::usage), 1);
  EXPECT_EQ(dropped(GettextFilter::words), 1);
  EXPECT_EQ(dropped(GettextFilter::duplicate), 2);  // sentence 5 (alpha's) and the one with a context
  EXPECT_EQ(f.stats(c, "absent").status, GettextDomainStats::Status::missing);
  EXPECT_EQ(f.stats(c, "korean").status, GettextDomainStats::Status::unsupported_charset);
  EXPECT_EQ(f.stats(c, "korean").pairs, 0);
  EXPECT_EQ(f.stats(c, "latin").pairs, 1);
}

TEST(GettextCorpus, SplitIsDeterministicSizedDisjointAndSeeded) {
  Fixture f;
  const GettextCorpus a = load_gettext_corpus(f.options);
  const GettextCorpus again = load_gettext_corpus(f.options);
  EXPECT_EQ(a.train.size(), 42 - 12);
  EXPECT_EQ(a.valid.size(), 5);
  EXPECT_EQ(a.test.size(), 7);
  EXPECT_EQ(a.train.sources, again.train.sources);
  EXPECT_EQ(a.valid.sources, again.valid.sources);
  EXPECT_EQ(a.test.sources, again.test.sources);
  // Disjoint parts, each in the corpus's (sorted) order, ranks as line numbers.
  std::vector<int64_t> ranks;
  for (const ParallelText* t : {&a.train, &a.valid, &a.test}) {
    EXPECT_TRUE(std::is_sorted(t->sources.begin(), t->sources.end()));
    EXPECT_TRUE(std::is_sorted(t->line_numbers.begin(), t->line_numbers.end()));
    EXPECT_EQ(t->line_numbers.size(), t->sources.size());
    ranks.insert(ranks.end(), t->line_numbers.begin(), t->line_numbers.end());
    EXPECT_TRUE(contains(t->name, "LC_MESSAGES"));
  }
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) EXPECT_EQ(ranks[i], static_cast<int64_t>(i) + 1);

  f.options.seed = 1;
  const GettextCorpus b = load_gettext_corpus(f.options);
  EXPECT_NE(pairs_of(b.test), pairs_of(a.test));
  EXPECT_EQ(all_pairs(b), all_pairs(a));
  EXPECT_EQ(b.hash, a.hash);  // the pair set, not its split
}

TEST(GettextCorpus, HashIsThePairSetsFnv) {
  Fixture f;
  const GettextCorpus a = load_gettext_corpus(f.options);
  EXPECT_EQ(a.hash, documented_hash(all_pairs(a)));
  f.tree.add("fr", "latin", build_mo({{"", "Content-Type: text/plain; charset=ISO-8859-1\n"},
                                      {"A latin sentence here", "Une phrase latine \xe9t\xe9 !"}}));
  EXPECT_NE(load_gettext_corpus(f.options).hash, a.hash);
}

TEST(GettextCorpus, AddingACatalogOnlyPushesPairsOutOfTest) {
  Fixture f;
  f.options.domains = {"beta"};
  const GettextCorpus before = load_gettext_corpus(f.options);
  f.tree.add("fr", "more", build_mo(sentences(100, 30)));
  f.options.domains = {"beta", "more"};
  const GettextCorpus after = load_gettext_corpus(f.options);
  EXPECT_EQ(after.size(), before.size() + 30);
  // A pair of beta's in the new test set was in the old one: it competed with fewer pairs there.
  const auto old_pairs = all_pairs(before);
  const auto old_test = pairs_of(before.test);
  int from_beta = 0;
  for (const auto& p : pairs_of(after.test)) {
    if (!old_pairs.count(p)) continue;
    ++from_beta;
    EXPECT_TRUE(old_test.count(p)) << p.first;
  }
  EXPECT_GT(from_beta, 0);  // with 40 of 70 pairs, beta holds some of test (seed 0)
}

TEST(GettextCorpus, ManifestListsEveryDomainAndTheTotals) {
  Fixture f;
  const GettextCorpus c = load_gettext_corpus(f.options);
  const std::string m = c.manifest_text();
  const std::string dir = f.tree.dir.path + "/fr/LC_MESSAGES/";
  EXPECT_TRUE(contains(m, dir + "beta.mo: 47 entries, 39 pairs\n")) << m;
  EXPECT_TRUE(contains(m, dir + "alpha.mo: 2 entries, 2 pairs\n")) << m;
  EXPECT_TRUE(contains(m, dir + "absent.mo: missing\n")) << m;
  EXPECT_TRUE(contains(m, dir + "korean.mo: 1 entries, not read: charset EUC-KR")) << m;
  EXPECT_TRUE(contains(m, "dropped: plural 1, untranslated 1, encoding 0, identical 1, control 0, placeholder 1")) << m;
  EXPECT_TRUE(contains(m, "duplicate 2\n")) << m;
  EXPECT_TRUE(contains(m, "total: en -> fr, 5 domains (1 missing, 1 in another charset), 51 entries, 42 pairs: "
                          "train 30, valid 5, test 7 (seed 0); hash " + fmt::format("{:016x}", c.hash))) << m;
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 5 + 2);  // a line per domain, the dropped line, the total
}

TEST(GettextCorpus, RefusalsSayWhatToDo) {
  Fixture f;
  GettextCorpusOptions o = f.options;
  o.language = "de";  // no such directory
  expect_error<IOError>([&] { load_gettext_corpus(o); }, {"'de'", "scripts/setup", "path-exclude"});
  o = f.options;
  o.domains = {"absent", "other"};
  expect_error<IOError>([&] { load_gettext_corpus(o); }, {"none of the 2 catalogs", "scripts/setup"});
  o = f.options;
  o.valid_size = 30;
  o.test_size = 12;  // 42 pairs: train would be empty
  expect_error<ValueError>([&] { load_gettext_corpus(o); }, {"42 pairs", "train empty"});
  for (const char* bad : {"", "..", "fr/../de", "f r"}) {
    o = f.options;
    o.language = bad;
    expect_error<ValueError>([&] { load_gettext_corpus(o); }, {"language"});
  }
  o = f.options;
  o.domains = {"beta", "beta"};
  expect_error<ValueError>([&] { load_gettext_corpus(o); }, {"'beta' is listed twice"});
  o.domains = {};
  expect_error<ValueError>([&] { load_gettext_corpus(o); }, {"empty"});
  o = f.options;
  o.test_size = -1;
  expect_error<ValueError>([&] { load_gettext_corpus(o); }, {"-1"});
  f.tree.add("fr", "beta", "not a catalog");  // a malformed catalog is read_mo's error
  expect_error<IOError>([&] { load_gettext_corpus(f.options); }, {"beta.mo", "not a .mo catalog"});
}

// The machine's own catalogs, when scripts/setup's packages are installed.
TEST(GettextCorpus, InstalledCatalogs) {
  for (const std::string lang : {"fr", "de", "ko"}) {
    SCOPED_TRACE(lang);
    GettextCorpusOptions o;
    o.language = lang;
    o.valid_size = 100;
    o.test_size = 100;
    const fs::path dir = fs::path(o.locale_root) / lang / "LC_MESSAGES";
    if (std::none_of(o.domains.begin(), o.domains.end(), [&](const std::string& d) {
          return fs::exists(dir / (d + ".mo"));
        }))
      GTEST_SKIP() << "none of the default catalogs is in " << dir << " (scripts/setup installs them)";
    const GettextCorpus c = load_gettext_corpus(o);
    EXPECT_EQ(c.domains.size(), gettext_default_domains().size());
    EXPECT_GT(c.size(), 1000) << c.manifest_text();
    std::set<std::string> sources;
    for (const ParallelText* t : {&c.train, &c.valid, &c.test})
      for (int64_t i = 0; i < t->size(); ++i) {
        const std::string& s = t->sources[static_cast<size_t>(i)];
        EXPECT_TRUE(sources.insert(s).second) << "duplicate source " << s;
        EXPECT_EQ(gettext_sentence_filter(s, t->targets[static_cast<size_t>(i)]), std::nullopt) << s;
      }
    EXPECT_EQ(c.hash, documented_hash(all_pairs(c)));
  }
}

}  // namespace
