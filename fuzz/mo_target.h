// The fuzz target of GNU gettext catalogs (attograd/data/mo.h), beside fuzz/targets.h's
// loaders: fuzz/mo.cpp runs it under libFuzzer, tests/test_mo.cpp replays
// fuzz/corpus/mo/ and fuzz/regressions/mo/ through it in every normal build.
#pragma once
#include <string_view>

#include <attograd/autograd/error.h>
#include <attograd/data/gettext_corpus.h>
#include <attograd/data/mo.h>
#include "targets.h"

namespace attograd::fuzz {

// .mo catalogs: whatever parses is made of the file's own bytes (no more
// bytes of text than the file holds, no NUL left inside a string, a context
// without its separator), and the corpus's sentence filter takes any pair of
// its strings without throwing.
inline void mo(std::string_view bytes) {
  MoCatalog c;
  try {
    c = parse_mo(bytes, "fuzz");
  } catch (const IOError&) {
    return;
  }
  const auto clean = [](std::string_view s) { return s.find('\0') == std::string_view::npos; };
  size_t text = c.header.size();
  require(c.entries.size() <= bytes.size() / 8, "more entries than the file has table room for");
  for (const MoEntry& e : c.entries) {
    require(clean(e.context) && clean(e.msgid) && clean(e.msgid_plural), "a NUL inside an original");
    require(e.context.find('\x04') == std::string::npos, "a context separator left in the context");
    require(!e.msgstr.empty(), "a message without a translation form");
    text += e.context.size() + e.msgid.size() + e.msgid_plural.size();
    for (const std::string& s : e.msgstr) {
      require(clean(s), "a NUL inside a translation form");
      text += s.size();
    }
    gettext_sentence_filter(e.msgid, e.msgstr.front());
  }
  require(text <= bytes.size(), "more text than the file holds");
}

}  // namespace attograd::fuzz
