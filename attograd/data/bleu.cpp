#include <attograd/data/bleu.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <unordered_map>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/data/tokenizer.h>

namespace attograd {
namespace {

constexpr int kOrder = 4;
constexpr int kCharOrder = 6;

// ---- whitespace as Python's str.split() sees it ----------------------------------------
// sacreBLEU splits tokens and strips chrF's spaces with str.split(), which
// breaks at every Unicode whitespace code point, not only the ASCII ones.

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// Bytes of the whitespace code point starting at s[i], or 0 if there is none.
// Only complete, shortest-form two- and three-byte sequences can be spaces
// beyond ASCII, so text that is not valid UTF-8 is read byte by byte without
// failing (Python would not have decoded it at all).
size_t space_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  if (b(0) < 0x80) return is_python_space(b(0)) ? 1 : 0;
  if ((b(0) & 0xE0) == 0xC0 && cont(1)) {
    const uint32_t cp = ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    return cp >= 0x80 && is_python_space(cp) ? 2 : 0;
  }
  if ((b(0) & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    const uint32_t cp = ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    return cp >= 0x800 && is_python_space(cp) ? 3 : 0;
  }
  return 0;
}

// Python's str.split(): the maximal runs of non-whitespace.
TokenSeq split_python(std::string_view s) {
  TokenSeq out;
  size_t i = 0, start = 0;
  while (i < s.size()) {
    if (const size_t sp = space_length(s, i)) {
      if (i > start) out.emplace_back(s.substr(start, i - start));
      i += sp;
      start = i;
    } else {
      ++i;
    }
  }
  if (i > start) out.emplace_back(s.substr(start, i - start));
  return out;
}

// Python's str.rstrip(): sacreBLEU's BLEU strips each sentence before tokenizing,
// which decides whether a final "-\n" is deleted as a line-break hyphen.
std::string_view rstrip_python(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t sp = space_length(s, i);
    i += sp ? sp : 1;
    if (!sp) end = i;
  }
  return s.substr(0, end);
}

// ---- the 13a tokenizer ------------------------------------------------------------------

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0;;) {
    const size_t hit = s.find(from, i);
    if (hit == std::string_view::npos) {
      out.append(s.substr(i));
      return out;
    }
    out.append(s.substr(i, hit - i)).append(to);
    i = hit + from.size();
  }
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

// The first rule's character class: ASCII punctuation except ' , - . (and the
// space, which it also pads, harmlessly).
bool is_13a_punct(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  return (c >= 0x20 && c <= 0x26) || (c >= 0x28 && c <= 0x2B) || c == '/' || (c >= 0x3A && c <= 0x40) ||
         (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}

// One regex-substitution pass of a two-character pattern, scanned as Python's
// re.sub scans: leftmost match first, matches never overlap, and the text a
// match consumed is not looked at again. `emit` writes the replacement of a
// matched pair. Working on bytes gives the same result as on code points: every
// character a pattern names is ASCII, and UTF-8 never uses ASCII bytes inside
// a longer character.
template <class Match, class Emit>
std::string pair_pass(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// ---- n-gram statistics over sequences of ids ---------------------------------------------
// Tokens (BLEU) or code points (chrF) become 32-bit ids. The n-grams of a
// hypothesis and its references are then numbered densely, order by order, so
// that equal n-grams get equal numbers in every sequence: an n-gram is its
// (n-1)-gram's number paired with its last id, one 64-bit key, and sorting the
// keys numbers them. Counting is then indexing small arrays: no n-gram of
// strings is ever built, hashed or compared.

using Ids = std::vector<uint32_t>;

class NgramNumbering {
 public:
  explicit NgramNumbering(std::vector<const Ids*> seqs) : seqs_(std::move(seqs)), numbers_(seqs_.size()) {}

  // Moves to the next order (the first call numbers the 1-grams).
  void next_order() {
    ++order_;
    // (key, where the number goes), sorted by key: runs of equal keys share a number.
    std::vector<std::pair<uint64_t, uint32_t*>> keyed;
    for (size_t k = 0; k < seqs_.size(); ++k) {
      const Ids& seq = *seqs_[k];
      std::vector<uint32_t>& num = numbers_[k];
      const size_t count = seq.size() >= order_ ? seq.size() - order_ + 1 : 0;
      // The previous order's numbers, one per (n-1)-gram, each extended by the id that follows.
      if (order_ > 1) num.resize(count);
      else num.assign(count, 0);
      for (size_t i = 0; i < count; ++i)
        keyed.emplace_back((static_cast<uint64_t>(num[i]) << 32) | seq[i + order_ - 1], &num[i]);
    }
    if (keyed.size() > std::numeric_limits<uint32_t>::max())
      fail<ValueError>("ngram statistics", "more than 2^32 n-grams in one sentence and its references");
    std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    distinct_ = 0;
    for (size_t j = 0; j < keyed.size(); ++j) {
      if (j > 0 && keyed[j].first != keyed[j - 1].first) ++distinct_;
      *keyed[j].second = static_cast<uint32_t>(distinct_);
    }
    if (!keyed.empty()) ++distinct_;
  }

  // The numbers of sequence k's n-grams at the current order, one per start position.
  const std::vector<uint32_t>& grams(size_t k) const { return numbers_[k]; }
  // How many different n-grams the sequences have together at the current order.
  size_t distinct() const { return distinct_; }

  // How often each n-gram number occurs in sequence k.
  std::vector<int64_t> histogram(size_t k) const {
    std::vector<int64_t> h(distinct_, 0);
    for (uint32_t x : numbers_[k]) ++h[x];
    return h;
  }

 private:
  std::vector<const Ids*> seqs_;
  std::vector<std::vector<uint32_t>> numbers_;
  size_t order_ = 0, distinct_ = 0;
};

// Σ over n-grams of min(a[x], b[x]): clipped matches of counts a against counts b.
int64_t clipped(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  int64_t m = 0;
  for (size_t x = 0; x < a.size(); ++x) m += std::min(a[x], b[x]);
  return m;
}

// Ids for the tokens of one hypothesis and its references, shared so equal
// tokens get equal ids.
class Vocab {
 public:
  Ids encode(const TokenSeq& tokens) {
    Ids out;
    out.reserve(tokens.size());
    for (const std::string& t : tokens) {
      // Unreachable on input that fits in memory (a token is at least a byte), but a wrapped id would merge tokens.
      if (ids_.size() >= std::numeric_limits<uint32_t>::max())
        fail<ValueError>("corpus_bleu", "more than 2^32 distinct tokens in one sentence");
      out.push_back(ids_.try_emplace(t, static_cast<uint32_t>(ids_.size())).first->second);
    }
    return out;
  }

 private:
  std::unordered_map<std::string_view, uint32_t> ids_;  // views into the caller's tokens
};

// ---- BLEU --------------------------------------------------------------------------------

// Adds one sentence's statistics to s: lengths (the closest reference length,
// the shorter on a tie) and per-order clipped matches and totals.
void add_bleu_sentence(const TokenSeq& hyp, std::span<const TokenSeq* const> refs, BleuScore& s) {
  Vocab vocab;
  const Ids h = vocab.encode(hyp);
  std::vector<Ids> r;
  r.reserve(refs.size());
  for (const TokenSeq* ref : refs) r.push_back(vocab.encode(*ref));

  const auto hyp_len = static_cast<int64_t>(h.size());
  int64_t closest = -1;
  for (const Ids& ref : r) {
    const auto len = static_cast<int64_t>(ref.size());
    const int64_t diff = std::abs(len - hyp_len), best = std::abs(closest - hyp_len);
    if (closest < 0 || diff < best || (diff == best && len < closest)) closest = len;
  }
  s.hyp_len += hyp_len;
  s.ref_len += std::max<int64_t>(closest, 0);

  std::vector<const Ids*> seqs{&h};
  for (const Ids& ref : r) seqs.push_back(&ref);
  NgramNumbering grams(std::move(seqs));
  for (int n = 1; n <= kOrder; ++n) {
    grams.next_order();
    // An n-gram is clipped to its largest count in any one reference.
    std::vector<int64_t> most(grams.distinct(), 0);
    for (size_t k = 1; k <= r.size(); ++k) {
      const std::vector<int64_t> rc = grams.histogram(k);
      for (size_t x = 0; x < most.size(); ++x) most[x] = std::max(most[x], rc[x]);
    }
    s.total[n - 1] += static_cast<int64_t>(grams.grams(0).size());
    s.correct[n - 1] += clipped(grams.histogram(0), most);
  }
}

// BP, precisions and the score from the summed statistics (sacreBLEU's compute_bleu).
void finish_bleu(BleuScore& s, BleuSmoothing smoothing) {
  s.brevity_penalty = s.hyp_len >= s.ref_len ? 1.0
                      : s.hyp_len > 0        ? std::exp(1.0 - static_cast<double>(s.ref_len) / static_cast<double>(s.hyp_len))
                                             : 0.0;
  if (s.correct[0] == 0) return;  // nothing matches (no higher-order match either)
  double log_sum = 0, unmatched = 1;
  for (int n = 0; n < kOrder; ++n) {
    if (s.total[n] == 0) return;  // no n-grams of this order anywhere: BLEU-4 is 0
    if (s.correct[n] > 0) {
      s.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    } else if (smoothing == BleuSmoothing::exp) {
      unmatched *= 2;
      s.precisions[n] = 100.0 / (unmatched * static_cast<double>(s.total[n]));
    } else {
      return;
    }
    log_sum += std::log(s.precisions[n] / 100.0);
  }
  s.score = 100.0 * s.brevity_penalty * std::exp(log_sum / kOrder);
}

// The reference sets as pointers, checked against the hypothesis count.
using SetViews = std::vector<const std::vector<std::string>*>;

void check_sets(const char* op, size_t hypotheses, const SetViews& sets) {
  if (sets.empty()) fail<ValueError>(op, "expected at least one reference set, got none");
  for (size_t k = 0; k < sets.size(); ++k)
    if (sets[k]->size() != hypotheses)
      fail<ValueError>(op, "expected one reference per hypothesis, got {} hypotheses and {} references{}", hypotheses,
                       sets[k]->size(), sets.size() > 1 ? fmt::format(" in reference set {}", k) : std::string());
}

// The non-empty references of sentence i (sacreBLEU skips "" so that sentences
// may have different numbers of references); ValueError if none is left.
std::vector<const std::string*> references_of(const char* op, const SetViews& sets, size_t i) {
  std::vector<const std::string*> refs;
  for (const auto* set : sets)
    if (!(*set)[i].empty()) refs.push_back(&(*set)[i]);
  if (refs.empty())
    fail<ValueError>(op, "sentence {} has no reference (the reference is empty); hint: sacreBLEU refuses an empty "
                         "reference too, so drop the sentence pair",
                     i);
  return refs;
}

BleuScore bleu_13a(const char* op, const std::vector<std::string>& hypotheses, const SetViews& sets,
                   BleuSmoothing smoothing) {
  check_sets(op, hypotheses.size(), sets);
  BleuScore s;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    std::vector<TokenSeq> refs;
    for (const std::string* r : references_of(op, sets, i)) refs.push_back(tokenize_13a(rstrip_python(*r)));
    std::vector<const TokenSeq*> ref_ptrs;
    for (const TokenSeq& r : refs) ref_ptrs.push_back(&r);
    add_bleu_sentence(tokenize_13a(rstrip_python(hypotheses[i])), ref_ptrs, s);
  }
  finish_bleu(s, smoothing);
  return s;
}

// ---- chrF --------------------------------------------------------------------------------

// Per order n = 1..6: hypothesis n-grams, reference n-grams, matches.
using ChrfStats = std::array<int64_t, 3 * kCharOrder>;

// The code points of s with every whitespace character removed; ValueError for invalid UTF-8.
Ids chrf_chars(std::string_view s, const char* op) {
  Ids out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_char_length(s, i, op);
    const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
    uint32_t cp = len == 1 ? b(0) : b(0) & (0x7Fu >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (b(k) & 0x3Fu);
    if (!is_python_space(cp)) out.push_back(cp);
    i += len;
  }
  return out;
}

// One ChrfStats per reference, all numbered together.
std::vector<ChrfStats> chrf_sentence(const Ids& hyp, const std::vector<Ids>& refs) {
  std::vector<const Ids*> seqs{&hyp};
  for (const Ids& r : refs) seqs.push_back(&r);
  NgramNumbering grams(std::move(seqs));
  std::vector<ChrfStats> st(refs.size(), ChrfStats{});
  for (int n = 1; n <= kCharOrder; ++n) {
    grams.next_order();
    const std::vector<int64_t> hc = grams.histogram(0);
    const auto hyp_count = static_cast<int64_t>(grams.grams(0).size());
    for (size_t k = 0; k < refs.size(); ++k) {
      const auto ref_count = static_cast<int64_t>(grams.grams(k + 1).size());
      // As sacreBLEU: an order the reference is too short for counts no hypothesis
      // n-grams either, so short references do not lower the corpus precision.
      st[k][3 * (n - 1)] = ref_count > 0 ? hyp_count : 0;
      st[k][3 * (n - 1) + 1] = ref_count;
      st[k][3 * (n - 1) + 2] = clipped(hc, grams.histogram(k + 1));
    }
  }
  return st;
}

double chrf_from_stats(const ChrfStats& st, int beta) {
  double precision = 0, recall = 0;
  int effective = 0;
  for (int n = 0; n < kCharOrder; ++n) {
    const int64_t hyp = st[3 * n], ref = st[3 * n + 1], match = st[3 * n + 2];
    if (hyp == 0 || ref == 0) continue;
    precision += static_cast<double>(match) / static_cast<double>(hyp);
    recall += static_cast<double>(match) / static_cast<double>(ref);
    ++effective;
  }
  if (effective == 0) return 0.0;
  precision /= effective;
  recall /= effective;
  if (precision + recall == 0) return 0.0;
  const double b2 = static_cast<double>(beta) * beta;
  return 100.0 * (1 + b2) * precision * recall / (b2 * precision + recall);
}

double chrf(const char* op, const std::vector<std::string>& hypotheses, const SetViews& sets, int beta) {
  if (beta < 0) fail<ValueError>(op, "expected beta >= 0 (2 for chrF2), got {}", beta);
  check_sets(op, hypotheses.size(), sets);
  ChrfStats corpus{};
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    std::vector<Ids> refs;
    for (const std::string* r : references_of(op, sets, i)) refs.push_back(chrf_chars(*r, op));
    // Several references: the one whose own chrF is highest, the first on a tie.
    ChrfStats best{};
    double best_f = -1;
    for (const ChrfStats& st : chrf_sentence(chrf_chars(hypotheses[i], op), refs)) {
      if (const double f = chrf_from_stats(st, beta); f > best_f) {
        best_f = f;
        best = st;
      }
    }
    for (size_t k = 0; k < corpus.size(); ++k) corpus[k] += best[k];
  }
  return chrf_from_stats(corpus, beta);
}

SetViews views(const ReferenceSets& sets) {
  SetViews v;
  for (const auto& s : sets) v.push_back(&s);
  return v;
}

}  // namespace

TokenSeq tokenize_13a(std::string_view sentence) {
  std::string s = replace_all(sentence, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = replace_all(s, "&quot;", "\"");
    s = replace_all(s, "&amp;", "&");
    s = replace_all(s, "&lt;", "<");
    s = replace_all(s, "&gt;", ">");
  }
  // The padding lets a sentence-final "." or "," see a non-digit after it.
  std::string padded;
  padded.reserve(s.size() * 2 + 2);
  padded += ' ';
  for (char c : s) {
    if (is_13a_punct(c)) {
      padded += ' ';
      padded += c;
      padded += ' ';
    } else {
      padded += c;
    }
  }
  padded += ' ';
  // "." and "," unless preceded by a digit, then unless followed by one (each a
  // separate pass, so "3.14" and "1,000" survive both), then "-" after a digit.
  s = pair_pass(
      padded, [](char a, char b) { return !is_digit(a) && is_period_or_comma(b); },
      [](std::string& out, char a, char b) { out.append({a, ' ', b, ' '}); });
  s = pair_pass(
      s, [](char a, char b) { return is_period_or_comma(a) && !is_digit(b); },
      [](std::string& out, char a, char b) { out.append({' ', a, ' ', b}); });
  s = pair_pass(
      s, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& out, char a, char b) { out.append({a, ' ', b, ' '}); });
  return split_python(s);
}

BleuScore corpus_bleu(const std::vector<TokenSeq>& hypotheses, const std::vector<TokenSeq>& references,
                      BleuSmoothing smoothing) {
  if (hypotheses.size() != references.size())
    fail<ValueError>("corpus_bleu", "expected one reference per hypothesis, got {} hypotheses and {} references",
                     hypotheses.size(), references.size());
  BleuScore s;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const TokenSeq* ref = &references[i];
    add_bleu_sentence(hypotheses[i], std::span<const TokenSeq* const>(&ref, 1), s);
  }
  finish_bleu(s, smoothing);
  return s;
}

BleuScore corpus_bleu_13a(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references,
                          BleuSmoothing smoothing) {
  return bleu_13a("corpus_bleu_13a", hypotheses, {&references}, smoothing);
}

BleuScore corpus_bleu_13a_multiref(const std::vector<std::string>& hypotheses, const ReferenceSets& reference_sets,
                                   BleuSmoothing smoothing) {
  return bleu_13a("corpus_bleu_13a_multiref", hypotheses, views(reference_sets), smoothing);
}

double corpus_chrf(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references, int beta) {
  return chrf("corpus_chrf", hypotheses, {&references}, beta);
}

double corpus_chrf_multiref(const std::vector<std::string>& hypotheses, const ReferenceSets& reference_sets, int beta) {
  return chrf("corpus_chrf_multiref", hypotheses, views(reference_sets), beta);
}

std::string format_bleu(const BleuScore& b) {
  const double ratio = b.ref_len > 0 ? static_cast<double>(b.hyp_len) / static_cast<double>(b.ref_len) : 0.0;
  return fmt::format("BLEU = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                     b.score, b.precisions[0], b.precisions[1], b.precisions[2], b.precisions[3], b.brevity_penalty,
                     ratio, b.hyp_len, b.ref_len);
}

std::string format_chrf(double chrf, int beta) { return fmt::format("chrF{} = {:.2f}", beta, chrf); }

std::string score_report(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  return format_bleu(corpus_bleu_13a(hypotheses, references)) + "\n" + format_chrf(corpus_chrf(hypotheses, references));
}

}  // namespace attograd
