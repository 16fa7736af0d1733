#include <attograd/data/vocab.h>

#include <algorithm>
#include <fstream>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tokenizer.h>

namespace attograd {

namespace {

// Why `token` cannot be a vocab entry, or "" if it can.
std::string_view token_problem(std::string_view token) {
  if (token.empty()) return "empty token";
  if (token.find_first_of("\r\n") != std::string_view::npos) return "token holds a line break";
  return "";
}

bool is_special(std::string_view token) {
  return std::find(Vocab::kSpecials.begin(), Vocab::kSpecials.end(), token) != Vocab::kSpecials.end();
}

}  // namespace

Vocab::Vocab() {
  for (std::string_view s : kSpecials) add(s);
}

int64_t Vocab::add(std::string_view token) {
  if (auto it = ids_.find(token); it != ids_.end()) return it->second;
  if (auto problem = token_problem(token); !problem.empty())
    fail<ValueError>("Vocab::add", "{} '{}'; hint: tokens are non-empty and on one line", problem, token);
  const int64_t id = size();
  tokens_.emplace_back(token);
  ids_.emplace(tokens_.back(), id);
  return id;
}

Vocab Vocab::from_symbols(const std::vector<std::string>& symbols) {
  Vocab v;
  for (size_t i = 0; i < symbols.size(); ++i) {
    const std::string& s = symbols[i];
    if (is_special(s))
      fail<ValueError>("Vocab::from_symbols", "symbol {} is the special token '{}'; hint: specials are added "
                       "automatically with ids 0..3", i, s);
    if (v.contains(s))
      fail<ValueError>("Vocab::from_symbols", "duplicate symbol '{}' at position {} (first at {})", s, i,
                       v.id(s) - kNumSpecials);
    if (auto problem = token_problem(s); !problem.empty())
      fail<ValueError>("Vocab::from_symbols", "{} at position {}", problem, i);
    v.add(s);
  }
  return v;
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& corpus, int64_t min_freq) {
  if (min_freq < 1) fail<ValueError>("Vocab::build", "min_freq must be >= 1, got {}", min_freq);
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> counts;
  for (const auto& sentence : corpus)
    for (const auto& tok : sentence) ++counts[tok];
  std::vector<std::pair<std::string, int64_t>> kept;
  for (auto& [tok, n] : counts)
    if (n >= min_freq && !is_special(tok)) kept.emplace_back(tok, n);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  Vocab v;
  for (const auto& [tok, n] : kept) {
    if (auto problem = token_problem(tok); !problem.empty())
      fail<ValueError>("Vocab::build", "{} in the corpus ('{}'); hint: split the text so that line breaks are "
                       "not tokens", problem, tok);
    v.add(tok);
  }
  return v;
}

Vocab Vocab::build(const std::vector<std::string>& texts, const Tokenizer& tokenizer, int64_t min_freq) {
  std::vector<std::vector<std::string>> corpus;
  corpus.reserve(texts.size());
  for (const auto& t : texts) corpus.push_back(tokenizer.split(t));
  return build(corpus, min_freq);
}

int64_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? kUnkId : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || id >= size())
    fail<IndexError>("Vocab::token", "id {} out of range for a vocab of size {}", id, size());
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int64_t> Vocab::encode(const std::vector<std::string>& tokens, OnUnknown on_unknown) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto it = ids_.find(tokens[i]);
    if (it != ids_.end()) {
      ids.push_back(it->second);
    } else if (on_unknown == OnUnknown::error) {
      fail<ValueError>("Vocab::encode", "unknown token '{}' at position {} (vocab size {}); hint: use "
                       "OnUnknown::unk to map it to <unk>", tokens[i], i, size());
    } else {
      ids.push_back(kUnkId);
    }
  }
  return ids;
}

std::vector<std::string> Vocab::decode(std::span<const int64_t> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (int64_t id : ids) out.push_back(token(id));
  return out;
}

std::vector<std::string> Vocab::decode_sequence(std::span<const int64_t> ids) const {
  std::vector<std::string> out;
  for (int64_t id : ids) {
    if (id == kEosId) break;
    if (id == kBosId || id == kPadId) continue;
    out.push_back(token(id));
  }
  return out;
}

void Vocab::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail<IOError>("Vocab::save", "cannot open '{}' for writing", path);
  for (const auto& t : tokens_) f << t << '\n';
  f.close();
  if (!f) fail<IOError>("Vocab::save", "writing '{}' failed", path);
}

Vocab Vocab::load(const std::string& path) {
  // A vocabulary of every Unicode code point is under 10 MB: the bound only
  // keeps a wrong path (a device, a huge file) from filling memory.
  constexpr uint64_t kMaxVocabFileBytes = uint64_t{256} << 20;
  return parse(read_file_bytes(path, kMaxVocabFileBytes), path);
}

Vocab Vocab::parse(std::string_view text, std::string_view source) {
  Vocab v;
  int64_t lineno = 0;
  while (!text.empty()) {  // a missing final newline is fine
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files
    if (lineno <= kNumSpecials) {
      const std::string_view want = kSpecials[static_cast<size_t>(lineno - 1)];
      if (line != want)
        fail<IOError>("Vocab::load", "'{}' line {}: expected '{}', got '{}'; hint: the file must start with "
                      "<pad> <bos> <eos> <unk>, one per line", source, lineno, want, line);
      continue;
    }
    if (line.empty())
      fail<IOError>("Vocab::load", "'{}' line {}: empty token; hint: one non-empty token per line", source, lineno);
    if (line.find('\r') != std::string_view::npos)
      fail<IOError>("Vocab::load", "'{}' line {}: token holds a carriage return; hint: one token per line",
                    source, lineno);
    if (v.contains(line))
      fail<IOError>("Vocab::load", "'{}' line {}: duplicate token '{}' (first on line {})", source, lineno, line,
                    v.id(line) + 1);
    v.add(line);
  }
  if (lineno < kNumSpecials)
    fail<IOError>("Vocab::load", "'{}' has {} line(s); expected at least the 4 special tokens <pad> <bos> "
                  "<eos> <unk>", source, lineno);
  return v;
}

}  // namespace attograd
