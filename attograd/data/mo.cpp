#include <attograd/data/mo.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>

namespace attograd {
namespace {

constexpr uint32_t kMoMagic = 0x950412de;
constexpr uint64_t kHeaderBytes = 7 * 4;  // magic, revision, N, O, T, hash size, hash offset

// Reads the file's 32-bit words in the writer's byte order; every offset it
// is given has been checked to leave 4 bytes before the end.
struct WordReader {
  std::string_view bytes;
  bool big_endian;
  uint32_t at(uint64_t offset) const {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) {
      const auto b = static_cast<uint8_t>(bytes[offset + static_cast<uint64_t>(big_endian ? i : 3 - i)]);
      w = (w << 8) | b;
    }
    return w;
  }
};

// The hint for a file whose first bytes are not the magic: what it may be instead.
std::string_view not_mo_hint(std::string_view bytes) {
  if (bytes.starts_with("#") || bytes.starts_with("msgid") || bytes.starts_with("msgctxt"))
    return "this looks like a .po text catalog; compile it with msgfmt";
  return "a .mo file is a compiled GNU gettext catalog (msgfmt writes one)";
}

// String i of the table at `table` ("original" or "translation"): its length
// and offset are checked against the file, and its NUL.
std::string_view table_string(const WordReader& r, uint64_t table, uint32_t i, const char* which,
                              std::string_view name) {
  const uint64_t entry = table + uint64_t{8} * i;  // inside the file: the table was checked whole
  const uint64_t length = r.at(entry);
  const uint64_t offset = r.at(entry + 4);
  const uint64_t size = r.bytes.size();
  if (offset + length >= size)  // the NUL after the string must be in the file too
    fail<IOError>("mo",
                  "{}: {} string {} (table entry at offset {}) spans bytes {}..{} plus its NUL, past the end of the "
                  "file ({} bytes); hint: the file is truncated or not a catalog",
                  name, which, i, entry, offset, offset + length, size);
  if (r.bytes[offset + length] != '\0')
    fail<IOError>("mo", "{}: {} string {} at offset {} ({} bytes) is not followed by a NUL (byte {:#04x} at offset {})",
                  name, which, i, offset, length, static_cast<uint8_t>(r.bytes[offset + length]), offset + length);
  return r.bytes.substr(offset, length);
}

// Splits `s` at every NUL (one part if it holds none).
std::vector<std::string> split_nul(std::string_view s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t nul = s.find('\0', start);
    parts.emplace_back(s.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
    if (nul == std::string_view::npos) return parts;
    start = nul + 1;
  }
}

// The message of original string i and its translation. The context is
// looked for in the singular only: a \x04 after the NUL is part of the plural.
MoEntry make_entry(std::string_view original, std::string_view translation, uint32_t i, std::string_view name) {
  MoEntry e;
  std::string_view singular = original;
  if (const size_t nul = original.find('\0'); nul != std::string_view::npos) {
    if (original.find('\0', nul + 1) != std::string_view::npos)
      fail<IOError>("mo", "{}: original string {} holds more than two NUL-separated parts; a message has a singular "
                    "and at most one plural", name, i);
    singular = original.substr(0, nul);
    e.msgid_plural = original.substr(nul + 1);
  }
  if (const size_t eot = singular.find('\x04'); eot != std::string_view::npos) {
    e.context = singular.substr(0, eot);
    singular.remove_prefix(eot + 1);
  }
  e.msgid = singular;
  e.msgstr = split_nul(translation);
  return e;
}

// The charset= value of the header's Content-Type line ("" if none).
std::string header_charset(std::string_view header) {
  size_t pos = 0;
  while (pos < header.size()) {
    const size_t nl = header.find('\n', pos);
    const std::string_view line = header.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? header.size() : nl + 1;
    if (!line.starts_with("Content-Type:")) continue;
    const size_t at = line.find("charset=");
    if (at == std::string_view::npos) return "";
    const std::string_view rest = line.substr(at + 8);
    return std::string(rest.substr(0, rest.find_first_of(" \t;\r")));
  }
  return "";
}

}  // namespace

MoCatalog parse_mo(std::string_view bytes, std::string_view name) {
  const uint64_t size = bytes.size();
  if (size < 4)
    fail<IOError>("mo", "{}: {} bytes is too short for a .mo catalog (its header alone is {} bytes); hint: {}", name,
                  size, kHeaderBytes, not_mo_hint(bytes));
  WordReader r{bytes, false};
  if (r.at(0) != kMoMagic) {
    r.big_endian = true;
    if (r.at(0) != kMoMagic)
      fail<IOError>("mo", "{}: not a .mo catalog: it starts with {:#010x}, not the magic {:#010x} (in either byte "
                    "order); hint: {}", name, r.at(0), kMoMagic, not_mo_hint(bytes));
  }
  if (size < kHeaderBytes)
    fail<IOError>("mo", "{}: {} bytes is shorter than a .mo header ({} bytes); hint: the file is truncated", name, size,
                  kHeaderBytes);
  const uint32_t revision = r.at(4);
  if (revision >> 16 > 1)
    fail<IOError>("mo", "{}: revision {}.{} is not read (major revisions 0 and 1 are); hint: a newer gettext wrote it",
                  name, revision >> 16, revision & 0xffff);
  const uint32_t n = r.at(8);
  const uint64_t originals = r.at(12);
  const uint64_t translations = r.at(16);
  // 64-bit arithmetic: N * 8 and offset + N * 8 stay below 2^36.
  const uint64_t table_bytes = uint64_t{8} * n;
  for (const auto& [table, which] : {std::pair{originals, "originals"}, std::pair{translations, "translations"}})
    if (table + table_bytes > size)
      fail<IOError>("mo", "{}: the table of {} ({} strings, {} bytes at offset {}) runs past the end of the file ({} "
                    "bytes); hint: the file is truncated or not a catalog", name, which, n, table_bytes, table, size);

  MoCatalog catalog;
  bool have_header = false;
  uint64_t text_bytes = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const std::string_view original = table_string(r, originals, i, "original", name);
    const std::string_view translation = table_string(r, translations, i, "translation", name);
    text_bytes += original.size() + translation.size();
    if (text_bytes > size)
      fail<IOError>("mo", "{}: the strings up to entry {} hold {} bytes, more than the file's {}: they overlap, which "
                    "no catalog compiler writes; hint: the file is corrupt or crafted", name, i, text_bytes, size);
    if (original.empty()) {
      if (have_header) fail<IOError>("mo", "{}: entry {} is a second header (a second empty msgid)", name, i);
      have_header = true;
      catalog.header = translation;
      catalog.charset = header_charset(translation);
      continue;
    }
    catalog.entries.push_back(make_entry(original, translation, i, name));
  }
  return catalog;
}

MoCatalog read_mo(const std::string& path) { return parse_mo(read_file_bytes(path, kMoFileLimit), path); }

}  // namespace attograd
