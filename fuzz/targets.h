// The fuzz targets: each feeds arbitrary bytes to one loader and checks what
// the loader promises. Bad content must end in an IOError (the loaders' error
// type, attograd/autograd/error.h); any other exception escapes (libFuzzer reports it
// as a crash, the regression test as a failure), and so does a broken
// promise about accepted input.
// Shared by the libFuzzer programs (fuzz/<target>.cpp, clang only) and by
// tests/test_fuzz_regressions.cpp, which replays fuzz/corpus/ and
// fuzz/regressions/ in every normal build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/corpus.h>
#include <attograd/data/tsv.h>
#include <attograd/data/vocab.h>
#include "examples/common/checkpoint.h"

namespace attograd::fuzz {

// A promise that accepted input must keep; its failure is a bug, not bad input.
struct BrokenPromise : std::logic_error {
  using std::logic_error::logic_error;
};

inline void require(bool ok, const char* what) {
  if (!ok) throw BrokenPromise(what);
}

// Whatever parses holds no tensor larger than the file it came from (a shape
// that lies about its size, as [2^62] F32 over 0 bytes did, would be read
// past its buffer).
inline void require_inside(const SafetensorsData& d, size_t file_bytes) {
  for (const auto& [name, t] : d.tensors)
    require(static_cast<uint64_t>(t.numel()) <= file_bytes / dtype_size(t.dtype()), "a tensor larger than its file");
}

// safetensors: whatever parses lies inside the file and re-serializes to a file that parses to the same
// tensors and metadata.
inline void safetensors(std::string_view bytes) {
  SafetensorsData d;
  try {
    d = parse_safetensors(bytes, "fuzz");
  } catch (const IOError&) {
    return;
  }
  require_inside(d, bytes.size());
  const SafetensorsData back = parse_safetensors(serialize_safetensors(d.tensors, d.metadata), "round trip");
  require(back.metadata == d.metadata, "metadata changed in a round trip");
  require(back.tensors.size() == d.tensors.size(), "tensor count changed in a round trip");
  for (const auto& [name, t] : d.tensors) {
    const Tensor& u = back.tensors.at(name);
    require(u.dtype() == t.dtype() && u.shape() == t.shape(), "dtype or shape changed in a round trip");
    const size_t n = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    require(n == 0 || std::string_view(static_cast<const char*>(t.raw_data()), n) ==
                          std::string_view(static_cast<const char*>(u.raw_data()), n),
            "bytes changed in a round trip");
  }
}

// Vocab: a loaded vocab starts with the specials, and its own file format
// (one token per line) loads back to the same vocab.
inline void vocab(std::string_view text) {
  Vocab v;
  try {
    v = Vocab::parse(text, "fuzz");
  } catch (const IOError&) {
    return;
  }
  for (int64_t i = 0; i < kNumSpecials; ++i)
    require(v.token(i) == Vocab::kSpecials[static_cast<size_t>(i)], "specials out of place");
  std::string saved;
  for (const std::string& t : v.tokens()) saved.append(t).push_back('\n');
  require(Vocab::parse(saved, "round trip") == v, "vocab changed in a round trip");
}

// TSV with 2 columns (the parallel corpora): every row has exactly 2
// non-empty fields without tabs or line breaks, one line number each.
inline void tsv(std::string_view text) {
  TsvTable t;
  try {
    t = parse_tsv(text, 2, "fuzz");
  } catch (const IOError&) {
    return;
  }
  require(t.rows.size() == t.line_numbers.size(), "one line number per row");
  for (const auto& row : t.rows) {
    require(row.size() == 2, "2 fields per row");
    for (const std::string& f : row)
      require(!f.empty() && f.find_first_of("\t\r\n") == std::string::npos, "fields are non-empty, on one line");
  }
}

// Parallel corpora (attograd/data/corpus.h): the bytes as a TSV of pairs, and cut at
// their first NUL into two aligned files. Whatever parses is one line number
// per pair, and each sentence non-empty, on one line, valid UTF-8, and no
// longer than the line limit.
inline void pairs(std::string_view bytes) {
  const auto check = [](const ParallelText& p) {
    require(p.sources.size() == p.targets.size() && p.targets.size() == p.line_numbers.size(), "one line per pair");
    for (const auto* side : {&p.sources, &p.targets})
      for (const std::string& s : *side) {
        require(!s.empty() && s.find_first_of("\t\r\n") == std::string::npos, "sentences non-empty, on one line");
        require(static_cast<int64_t>(s.size()) <= kCorpusLineLimit, "sentences within the line limit");
        for (size_t i = 0; i < s.size();) i += utf8_char_length(s, i, "fuzz");  // throws (escapes) if invalid
      }
  };
  try {
    check(parse_tsv_pairs(bytes, "fuzz"));
  } catch (const IOError&) {
  }
  const size_t cut = bytes.find('\0');
  if (cut == std::string_view::npos) return;
  try {
    check(parse_aligned_texts(bytes.substr(0, cut), bytes.substr(cut + 1), "fuzz.src", "fuzz.tgt"));
  } catch (const IOError&) {
  }
}

// Checkpoint files: a model file's metadata and a train file's progress
// either parse or give a typed error. fuzz/model_target.h goes further: it
// builds the model a file describes and runs it.
inline void checkpoint(std::string_view bytes) {
  SafetensorsData d;
  try {
    d = parse_safetensors(bytes, "fuzz");
  } catch (const IOError&) {
    return;
  }
  require_inside(d, bytes.size());
  try {
    app::parse_checkpoint_meta(d.metadata, "fuzz");
  } catch (const IOError&) {
  }
  try {
    app::parse_train_progress(d.tensors, "fuzz");
  } catch (const IOError&) {
  }
}

}  // namespace attograd::fuzz
