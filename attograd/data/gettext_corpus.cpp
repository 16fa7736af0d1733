#include <attograd/data/gettext_corpus.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/data/mo.h>
#include <attograd/data/tokenizer.h>

namespace attograd {
namespace {

constexpr std::array<std::string_view, kNumGettextFilters> kFilterNames = {
    "plural", "untranslated", "encoding", "identical", "control", "placeholder", "markup",
    "usage",  "layout",       "length",   "words",     "duplicate"};

constexpr std::string_view kSetupHint =
    "scripts/setup installs the catalogs; if their packages are installed, check that /usr/share/locale is not "
    "excluded by a path-exclude in /etc/dpkg/dpkg.cfg.d/ (slim container images drop it)";

// ---- checks of a pair --------------------------------------------------------

// Whether s is valid UTF-8; `chars` receives its number of code points.
bool valid_utf8(std::string_view s, int64_t& chars) {
  chars = 0;
  for (size_t i = 0; i < s.size(); ++chars) {
    try {
      i += utf8_char_length(s, i, "gettext");
    } catch (const ValueError&) {
      return false;
    }
  }
  return true;
}

// C0 controls, DEL, and the C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F).
bool has_control(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x20 || b == 0x7f) return true;
    if (b == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xa0) return true;
  }
  return false;
}

bool has_any(std::string_view a, std::string_view b, std::string_view chars) {
  return a.find_first_of(chars) != std::string_view::npos || b.find_first_of(chars) != std::string_view::npos;
}

bool starts_with_usage(std::string_view s) {
  constexpr std::string_view kUsage = "usage";
  if (s.size() < kUsage.size()) return false;
  for (size_t i = 0; i < kUsage.size(); ++i)
    if ((s[i] | 0x20) != kUsage[i]) return false;  // ASCII case folding: 'U' | 0x20 == 'u'
  return true;
}

bool badly_spaced(std::string_view s) {
  return s.empty() || s.front() == ' ' || s.back() == ' ' || s.find("  ") != std::string_view::npos;
}

int64_t count_words(std::string_view s) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : s) {
    if (c != ' ' && !in_word) ++words;
    in_word = c != ' ';
  }
  return words;
}

// ---- reading a catalog ---------------------------------------------------------

enum class Charset { utf8, ascii, latin1, other };

// The charset named in a header: case, '-' and '_' do not matter ("utf8",
// "UTF-8"); a catalog that names none is taken as ASCII.
Charset classify_charset(std::string_view name) {
  std::string key;
  for (char c : name)
    if (c != '-' && c != '_') key.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
  if (key == "utf8") return Charset::utf8;
  if (key.empty() || key == "ascii" || key == "usascii" || key == "ansix3.41968") return Charset::ascii;
  if (key == "iso88591" || key == "latin1") return Charset::latin1;
  return Charset::other;
}

// s as UTF-8, or nullopt if it is not valid in `charset`.
std::optional<std::string> to_utf8(std::string_view s, Charset charset) {
  if (charset == Charset::latin1) {
    std::string out;
    for (char c : s) {
      const auto b = static_cast<unsigned char>(c);
      if (b < 0x80) {
        out.push_back(c);
      } else {  // U+0080..U+00FF in two bytes
        out.push_back(static_cast<char>(0xc0 | (b >> 6)));
        out.push_back(static_cast<char>(0x80 | (b & 0x3f)));
      }
    }
    return out;
  }
  if (charset == Charset::ascii && std::any_of(s.begin(), s.end(), [](char c) { return c & 0x80; }))
    return std::nullopt;
  return std::string(s);  // UTF-8 is validated with the other checks
}

struct Pair {
  std::string source, target;
};

// Adds the catalog's pairs not seen before to `pairs`, counting in `stats`
// what became of each message.
void read_catalog(const MoCatalog& catalog, Charset charset, GettextDomainStats& stats,
                  std::unordered_set<std::string>& seen, std::vector<Pair>& pairs) {
  const auto drop = [&](GettextFilter f) { ++stats.dropped[static_cast<size_t>(f)]; };
  for (const MoEntry& e : catalog.entries) {
    if (e.has_plural()) {
      drop(GettextFilter::plural);
      continue;
    }
    if (e.msgstr.empty() || e.msgstr[0].empty()) {
      drop(GettextFilter::untranslated);
      continue;
    }
    std::optional<std::string> source = to_utf8(e.msgid, charset);
    std::optional<std::string> target = to_utf8(e.msgstr[0], charset);
    if (!source || !target) {
      drop(GettextFilter::encoding);
      continue;
    }
    if (const auto f = gettext_sentence_filter(*source, *target)) {
      drop(*f);
      continue;
    }
    if (!seen.insert(*source).second) {
      drop(GettextFilter::duplicate);
      continue;
    }
    pairs.push_back({std::move(*source), std::move(*target)});
    ++stats.pairs;
  }
}

// ---- checks of the options -------------------------------------------------------

void check_name(std::string_view what, std::string_view name) {
  const bool ok = !name.empty() && name != "." && name != ".." &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                           std::string_view("_-.@").find(c) != std::string_view::npos;
                  });
  if (!ok)
    fail<ValueError>("gettext_corpus", "{} '{}' must be a non-empty name of letters, digits and \"_-.@\" (a "
                     "directory or file name under the locale root, like \"fr\" or \"coreutils\")", what, name);
}

void check_options(const GettextCorpusOptions& o) {
  check_name("language", o.language);
  if (o.domains.empty()) fail<ValueError>("gettext_corpus", "the list of domains is empty");
  std::set<std::string_view> names;
  for (const std::string& d : o.domains) {
    check_name("domain", d);
    if (!names.insert(d).second) fail<ValueError>("gettext_corpus", "domain '{}' is listed twice", d);
  }
  if (o.valid_size < 0 || o.test_size < 0)
    fail<ValueError>("gettext_corpus", "valid and test sizes must be >= 0, got {} and {}", o.valid_size, o.test_size);
}

// ---- hashing and splitting ----------------------------------------------------------

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnvOffset) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnvPrime;
  }
  return h;
}

// splitmix64's finalizer: FNV-1a's last bytes barely reach its high bits,
// and the split orders pairs by the whole word.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t corpus_hash(const std::vector<Pair>& pairs) {
  uint64_t h = kFnvOffset;
  for (const Pair& p : pairs) {
    h = fnv1a(p.source, h);
    h = fnv1a("\t", h);
    h = fnv1a(p.target, h);
    h = fnv1a("\n", h);
  }
  return h;
}

// Moves the sorted pairs into the three parts (see load_gettext_corpus).
void split(std::vector<Pair>& pairs, const GettextCorpusOptions& o, GettextCorpus& corpus) {
  std::string seed_bytes;
  for (int i = 0; i < 8; ++i) seed_bytes.push_back(static_cast<char>(o.seed >> (8 * i)));
  const uint64_t seeded = fnv1a(seed_bytes);
  std::vector<std::pair<uint64_t, size_t>> order(pairs.size());
  for (size_t i = 0; i < pairs.size(); ++i) order[i] = {mix(fnv1a(pairs[i].source, seeded)), i};
  std::sort(order.begin(), order.end());  // ties (equal 64-bit hashes) fall back to corpus order
  std::vector<ParallelText*> part_of(pairs.size(), &corpus.train);
  const auto test_end = static_cast<size_t>(o.test_size);
  const auto valid_end = test_end + static_cast<size_t>(o.valid_size);  // < pairs.size(), checked by the caller
  for (size_t r = 0; r < valid_end; ++r) part_of[order[r].second] = r < test_end ? &corpus.test : &corpus.valid;
  for (size_t i = 0; i < pairs.size(); ++i) {
    ParallelText& part = *part_of[i];
    part.sources.push_back(std::move(pairs[i].source));
    part.targets.push_back(std::move(pairs[i].target));
    part.line_numbers.push_back(static_cast<int64_t>(i) + 1);
  }
}

}  // namespace

std::string_view gettext_filter_name(GettextFilter filter) {
  const auto i = static_cast<size_t>(filter);
  if (i >= kFilterNames.size()) fail<ValueError>("gettext_filter_name", "no filter numbered {}", i);
  return kFilterNames[i];
}

std::optional<GettextFilter> gettext_sentence_filter(std::string_view source, std::string_view target) {
  int64_t source_chars = 0, target_chars = 0;
  if (!valid_utf8(source, source_chars) || !valid_utf8(target, target_chars)) return GettextFilter::encoding;
  if (source == target) return GettextFilter::identical;
  if (has_control(source) || has_control(target)) return GettextFilter::control;
  if (has_any(source, target, "%${}\\`")) return GettextFilter::placeholder;
  if (has_any(source, target, "<>&_")) return GettextFilter::markup;
  if (source.starts_with('-') || starts_with_usage(source) || source.find_first_of("[]|=") != std::string_view::npos)
    return GettextFilter::usage;
  if (badly_spaced(source) || badly_spaced(target)) return GettextFilter::layout;
  if (source_chars > kGettextMaxChars || target_chars > kGettextMaxChars) return GettextFilter::length;
  if (count_words(source) < 2) return GettextFilter::words;
  return std::nullopt;
}

const std::vector<std::string>& gettext_default_domains() {
  // Domain (package): Linux-PAM (libpam-runtime), apt, libapt-pkg6.0, bash,
  // coreutils, dpkg, grep, sed, shadow (login), tar: on every Debian system;
  // at-spi2-core (at-spi2-common), gdk-pixbuf (libgdk-pixbuf2.0-common),
  // gettext-tools (gettext), git, glib20 (libglib2.0-data), gstreamer-1.0
  // (libgstreamer1.0-0), gtk20 and gtk20-properties (libgtk2.0-common), gtk30
  // and gtk30-properties (libgtk-3-common), libc (libc-l10n), make, procps-ng
  // (procps), shared-mime-info, xkeyboard-config (xkb-data), xz (xz-utils):
  // installed by scripts/setup. Each has fr, de and ko catalogs in UTF-8; on
  // Debian 12 they give about 10,400 fr, 10,100 de and 9,400 ko pairs.
  static const std::vector<std::string> domains = {
      "Linux-PAM", "apt", "at-spi2-core", "bash", "coreutils", "dpkg", "gdk-pixbuf", "gettext-tools", "git",
      "glib20", "grep", "gstreamer-1.0", "gtk20", "gtk20-properties", "gtk30", "gtk30-properties", "libapt-pkg6.0",
      "libc", "make", "procps-ng", "sed", "shadow", "shared-mime-info", "tar", "xkeyboard-config", "xz"};
  return domains;
}

GettextCorpus load_gettext_corpus(const GettextCorpusOptions& options) {
  check_options(options);
  GettextCorpus corpus;
  corpus.language = options.language;
  corpus.seed = options.seed;
  corpus.directory = (std::filesystem::path(options.locale_root) / options.language / "LC_MESSAGES").string();
  std::vector<std::string> domains = options.domains;
  std::sort(domains.begin(), domains.end());

  std::unordered_set<std::string> seen;
  std::vector<Pair> pairs;
  bool any = false;
  for (const std::string& domain : domains) {
    GettextDomainStats& stats = corpus.domains.emplace_back();
    stats.domain = domain;
    stats.path = corpus.directory + "/" + domain + ".mo";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(stats.path, ec)) {
      stats.status = GettextDomainStats::Status::missing;
      continue;
    }
    any = true;
    const MoCatalog catalog = read_mo(stats.path);
    stats.charset = catalog.charset;
    stats.entries = static_cast<int64_t>(catalog.entries.size());
    const Charset charset = classify_charset(catalog.charset);
    if (charset == Charset::other) {
      stats.status = GettextDomainStats::Status::unsupported_charset;
      continue;
    }
    read_catalog(catalog, charset, stats, seen, pairs);
  }
  if (!any) {
    std::error_code ec;
    if (!std::filesystem::is_directory(corpus.directory, ec))
      fail<IOError>("gettext_corpus", "no catalogs for language '{}': {} is not a directory; hint: {}",
                    options.language, corpus.directory, kSetupHint);
    fail<IOError>("gettext_corpus", "none of the {} catalogs asked for is in {} (looked for {}.mo, ...); hint: {}",
                  domains.size(), corpus.directory, domains.front(), kSetupHint);
  }
  const auto held_out = static_cast<uint64_t>(options.valid_size) + static_cast<uint64_t>(options.test_size);
  if (pairs.size() <= held_out)
    fail<ValueError>("gettext_corpus", "the catalogs in {} give {} pairs, not more than valid {} + test {}, which "
                     "would leave train empty; hint: ask for smaller parts, or install more catalogs ({})",
                     corpus.directory, pairs.size(), options.valid_size, options.test_size, kSetupHint);

  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.source < b.source; });
  corpus.hash = corpus_hash(pairs);
  corpus.train.name = fmt::format("{} (gettext, train)", corpus.directory);
  corpus.valid.name = fmt::format("{} (gettext, valid)", corpus.directory);
  corpus.test.name = fmt::format("{} (gettext, test)", corpus.directory);
  split(pairs, options, corpus);
  return corpus;
}

std::string GettextCorpus::manifest_text() const {
  std::string out;
  std::array<int64_t, kNumGettextFilters> dropped{};
  int64_t entries = 0, missing = 0, unread = 0;
  for (const GettextDomainStats& d : domains) {
    entries += d.entries;
    for (size_t f = 0; f < dropped.size(); ++f) dropped[f] += d.dropped[f];
    switch (d.status) {
      case GettextDomainStats::Status::read:
        out += fmt::format("{}: {} entries, {} pairs\n", d.path, d.entries, d.pairs);
        break;
      case GettextDomainStats::Status::missing:
        ++missing;
        out += fmt::format("{}: missing\n", d.path);
        break;
      case GettextDomainStats::Status::unsupported_charset:
        ++unread;
        out += fmt::format("{}: {} entries, not read: charset {} (UTF-8, ISO-8859-1 and ASCII are)\n", d.path,
                           d.entries, d.charset);
        break;
    }
  }
  out += "dropped:";
  for (size_t f = 0; f < dropped.size(); ++f)
    out += fmt::format("{} {} {}", f ? "," : "", kFilterNames[f], dropped[f]);
  out += fmt::format("\ntotal: en -> {}, {} domains ({} missing, {} in another charset), {} entries, {} pairs: train "
                     "{}, valid {}, test {} (seed {}); hash {:016x}\n",
                     language, domains.size(), missing, unread, entries, size(), train.size(), valid.size(),
                     test.size(), seed, hash);
  return out;
}

}  // namespace attograd
