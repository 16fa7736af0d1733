// Vocab: token strings <-> ids.
//
// Ids 0..3 are always the special tokens <pad> <bos> <eos> <unk>; other
// tokens follow from id 4. The file format is plain text, one token per line,
// line number - 1 = id, so the four specials are the first four lines. A token
// is any non-empty string without '\n' or '\r' (spaces are allowed, so a
// character-level vocab can hold " ").
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace attograd {

class Tokenizer;

inline constexpr int64_t kPadId = 0;        // <pad>: fills rows up to the batch's longest
inline constexpr int64_t kBosId = 1;        // <bos>: first token of the decoder input
inline constexpr int64_t kEosId = 2;        // <eos>: ends sources and targets
inline constexpr int64_t kUnkId = 3;        // <unk>: a token not in the vocab
inline constexpr int64_t kNumSpecials = 4;  // number of specials, so the first ordinary token's id

// What encode does with a token that is not in the vocab.
enum class OnUnknown { unk, error };

// Token <-> id map; ids 0..3 are the specials <pad>, <bos>, <eos>, <unk>.
class Vocab {
 public:
  // The special tokens' strings, indexed by id (the vocab file's first four lines).
  static constexpr std::array<std::string_view, kNumSpecials> kSpecials = {"<pad>", "<bos>", "<eos>", "<unk>"};

  Vocab();  // the four specials only

  // Specials, then `symbols` in order (ids 4, 5, ...). Empty, duplicate or
  // special symbols are a ValueError.
  static Vocab from_symbols(const std::vector<std::string>& symbols);
  // Specials, then every token seen at least min_freq times, most frequent
  // first (ties in byte order), so the result does not depend on corpus order.
  // Specials found in the corpus keep their fixed ids.
  static Vocab build(const std::vector<std::vector<std::string>>& corpus, int64_t min_freq = 1);
  static Vocab build(const std::vector<std::string>& texts, const Tokenizer& tokenizer, int64_t min_freq = 1);

  // Appends token (ValueError if empty or holding '\n'/'\r'); returns its id,
  // the existing one if it is already present.
  int64_t add(std::string_view token);

  // Number of tokens, specials included.
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Whether token has an id.
  bool contains(std::string_view token) const { return ids_.find(token) != ids_.end(); }
  int64_t id(std::string_view token) const;           // kUnkId when absent
  const std::string& token(int64_t id) const;         // IndexError when out of range
  // Every token by id.
  const std::vector<std::string>& tokens() const { return tokens_; }

  // Unknown tokens become <unk>, or with OnUnknown::error throw a ValueError
  // naming the token and its position.
  std::vector<int64_t> encode(const std::vector<std::string>& tokens, OnUnknown on_unknown = OnUnknown::unk) const;
  // Every id to its token, specials included.
  std::vector<std::string> decode(std::span<const int64_t> ids) const;
  // A model output: stops at the first <eos>, drops <bos> and <pad>.
  std::vector<std::string> decode_sequence(std::span<const int64_t> ids) const;

  void save(const std::string& path) const;  // IOError on failure
  // IOError when the file is missing or corrupt (the four specials not first
  // in order, an empty line, a duplicate token); the message names the line.
  static Vocab load(const std::string& path);
  // The same format held in memory (what load reads); `source` names it in errors.
  static Vocab parse(std::string_view text, std::string_view source = "<vocab>");

  // Same tokens with the same ids.
  bool operator==(const Vocab& other) const { return tokens_ == other.tokens_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;                                   // id -> token
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ids_;  // token -> id
};

}  // namespace attograd
