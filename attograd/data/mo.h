// GNU gettext message catalogs in their compiled form, the .mo files under
// /usr/share/locale/<lang>/LC_MESSAGES/: sentences of a program translated by
// people, which attograd/data/gettext_corpus.h turns into a parallel corpus.
//
// Format (GNU gettext manual, "The Format of GNU MO Files"): a header of seven
// 32-bit words in the writer's byte order, told by the magic 0x950412de read
// either way round: magic, revision, N (number of strings), O (offset of the
// table of original strings), T (offset of the table of translations), and
// the size and offset of a hash table. Each table is N pairs (length, offset);
// a string is `length` bytes at `offset` followed by a NUL. An original is
// "msgid", "msgid\0msgid_plural", or either prefixed by "context\x04"; its
// translation holds one form, or the plural forms separated by NULs. The
// entry whose original is empty is the header, whose "Content-Type:
// text/plain; charset=..." line names the charset of the strings.
//
// What is read: revisions with major number 0 or 1 (the minor number is
// ignored; the system-dependent strings of revision 1, which only carry
// <inttypes.h> format directives, are not read). The hash table is ignored.
// What is refused, with an IOError naming the file, the offset or entry, and
// what was found: a file shorter than the header, a wrong magic (with a hint:
// a text file is not a catalog), another major revision, a table or a string
// that runs past the end of the file, a string without its NUL, an original
// with more than one plural form, a second header, and strings that together
// are longer than the file (strings may only overlap in files no compiler
// writes, and there they would let a small file expand without bound).
// Strings are returned as bytes, in the catalog's charset: nothing is
// converted or validated here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attograd {

// One message of a catalog.
struct MoEntry {
  std::string context;               // msgctxt; empty if none
  std::string msgid;                 // the original (English, by gettext's convention)
  std::string msgid_plural;          // the original's plural; empty if the message has no plural
  std::vector<std::string> msgstr;   // the translation: one form, or one per plural form
  // Whether the message has plural forms.
  bool has_plural() const { return !msgid_plural.empty(); }
};

// A whole catalog, header apart.
struct MoCatalog {
  std::string header;            // the translation of the empty msgid ("Project-Id-Version: ..."); empty if none
  std::string charset;           // the header's "charset=" value as written ("UTF-8"); empty if none
  std::vector<MoEntry> entries;  // in the file's order (sorted by original), the header excluded
};

// read_mo's bound on a file's size: far above the largest catalog Debian
// ships (about 1 MB), far below what would strain a machine's memory.
inline constexpr uint64_t kMoFileLimit = uint64_t{64} << 20;  // 64 MiB

// The catalog in `bytes`; `name` labels errors ("fr/LC_MESSAGES/git.mo: ...").
// IOError for anything malformed (see the file comment).
MoCatalog parse_mo(std::string_view bytes, std::string_view name = "<mo>");
// parse_mo on the file at path, read with read_file_bytes(path, kMoFileLimit)
// (IOError if unreadable, larger, a directory or a device).
MoCatalog read_mo(const std::string& path);

}  // namespace attograd
