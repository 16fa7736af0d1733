#include <attograd/autograd/io/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <unordered_set>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include <attograd/autograd/tensor_impl.h>

namespace attograd {

// Tensor bytes are copied straight between memory and the file.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

// Same limit as the reference reader: a bigger header is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// `align_rank` orders the layout like the reference writer (its Dtype enum
// order, largest first): I64 > F64 > F32 > BF16 > BOOL.
struct DTypeCode {
  DType dtype;
  std::string_view code;
  int align_rank;
};
constexpr DTypeCode kCodes[] = {{DType::f32, "F32", 11}, {DType::f64, "F64", 12}, {DType::i64, "I64", 13},
                                {DType::b8, "BOOL", 0},  {DType::bf16, "BF16", 8}};

// Valid safetensors dtypes that attograd has no DType for.
constexpr std::string_view kUnsupportedCodes[] = {"U8",  "I8",  "F8_E5M2", "F8_E4M3", "I16",
                                                  "U16", "F16", "I32",     "U32",     "U64"};

const DTypeCode& code_of(DType d) {
  for (const DTypeCode& c : kCodes)
    if (c.dtype == d) return c;
  fail<DTypeError>("safetensors", "no safetensors code for dtype {}", dtype_name(d));
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// "safetensors: <source>: <what>"
template <class... Args>
[[noreturn]] void bad(std::string_view source, fmt::format_string<Args...> f, Args&&... args) {
  fail<IOError>("safetensors", "{}: {}", source, fmt::format(f, std::forward<Args>(args)...));
}

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// t's elements in row-major logical order, whatever its strides.
void append_tensor_bytes(std::string& out, const Tensor& t) {
  if (t.numel() == 0) return;
  const size_t es = dtype_size(t.dtype());
  if (t.is_contiguous()) {
    out.append(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * es);
    return;
  }
  const char* base = storage_base<const char>(t);
  for_each_offset(t.shape(), t.strides(), t.offset(),
                  [&](int64_t o) { out.append(base + static_cast<size_t>(o) * es, es); });
}

// ---- reading ------------------------------------------------------------------

// One header entry after its fields were checked on their own.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // byte range in the data buffer
};

// The most tensors a header may name. Real checkpoints hold thousands at most;
// the bound keeps a crafted header from costing more than a moment.
constexpr size_t kMaxTensors = 100'000;

// A first, linear pass over the header with nlohmann's SAX interface: it
// finds the first repeated key (nlohmann's DOM keeps one value without
// saying so) and stops past kMaxTensors top-level entries. Its callback
// parser would do the same in quadratic time: each object's end rescans its
// parent (nlohmann/json #5457).
class HeaderCheck {
 public:
  using json_t = json;
  std::optional<std::string> problem;  // what stopped the pass

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool start_object(std::size_t) {
    keys_.emplace_back();
    return true;
  }
  bool end_object() {
    keys_.pop_back();
    return true;
  }
  bool key(json::string_t& k) {
    if (keys_.size() == 1) {
      top_level_key_ = k;
      if (k != "__metadata__" && ++tensors_ > kMaxTensors)
        return stop(fmt::format("the header names more than {} tensors; hint: the file is corrupt or crafted",
                                kMaxTensors));
    }
    if (keys_.back().insert(k).second) return true;
    if (keys_.size() == 1) return stop(fmt::format("tensor '{}' appears more than once in the header", k));
    return stop(fmt::format("key '{}' appears more than once inside '{}'", k, top_level_key_));
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    return stop(fmt::format("the header is not valid JSON ({}); hint: the file is corrupt or not a safetensors file",
                            e.what()));
  }

 private:
  bool stop(std::string what) {
    problem = std::move(what);
    return false;
  }
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
  std::string top_level_key_;
  size_t tensors_ = 0;  // top-level keys besides "__metadata__"
};

json parse_header(std::string_view source, std::string_view text) {
  if (text.empty() || text.front() != '{')
    bad(source, "the header must be a JSON object starting with '{{', got {}",
        text.empty() ? std::string("an empty header") : fmt::format("first byte 0x{:02x}", static_cast<unsigned char>(text.front())));
  // nlohmann takes a NUL byte for the end of input and would ignore what follows.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    bad(source, "the header contains a NUL byte at header offset {}; hint: the file is corrupt", nul);
  try {
    HeaderCheck check;
    json::sax_parse(text.begin(), text.end(), &check);
    if (check.problem) bad(source, "{}", *check.problem);
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // out_of_range for a number too large for a double
    bad(source, "the header is not valid JSON ({}); hint: the file is corrupt or not a safetensors file",
        e.what());
  }
}

Metadata read_metadata(std::string_view source, const json& value) {
  Metadata out;
  if (value.is_null()) return out;  // the reference reads null as "no metadata"
  if (!value.is_object())
    bad(source, "\"__metadata__\" is a JSON {}, expected an object of string values", value.type_name());
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      bad(source, "\"__metadata__\" key '{}' has a JSON {} value ({}), expected a string", key,
          v.type_name(), v.dump());
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

const json& field(std::string_view source, const std::string& name, const json& entry, const char* key) {
  auto it = entry.find(key);
  if (it == entry.end()) bad(source, "tensor '{}': missing field \"{}\"", name, key);
  return *it;
}

DType read_dtype(std::string_view source, const std::string& name, const json& entry) {
  const json& v = field(source, name, entry, "dtype");
  if (!v.is_string())
    bad(source, "tensor '{}': field \"dtype\" is a JSON {}, expected a string", name, v.type_name());
  const std::string& code = v.get_ref<const std::string&>();
  for (const DTypeCode& c : kCodes)
    if (c.code == code) return c.dtype;
  for (std::string_view u : kUnsupportedCodes)
    if (u == code)
      bad(source, "tensor '{}': dtype {} is not supported by attograd (supported: F32, F64, I64, BOOL, BF16)",
          name, code);
  bad(source, "tensor '{}': unknown dtype \"{}\" (supported: F32, F64, I64, BOOL, BF16)", name, code);
}

// Every dim fits int64 and so does the product of the non-zero dims, so no
// later stride or element-count computation can overflow.
Shape read_shape(std::string_view source, const std::string& name, const json& entry) {
  const json& v = field(source, name, entry, "shape");
  if (!v.is_array())
    bad(source, "tensor '{}': field \"shape\" is a JSON {}, expected an array of sizes", name, v.type_name());
  Shape shape;
  uint64_t product = 1;
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  for (size_t d = 0; d < v.size(); ++d) {
    const json& s = v[d];
    if (s.is_number_integer() && !s.is_number_unsigned())
      bad(source, "tensor '{}': shape {} has negative size {} at dim {}", name, v.dump(), s.get<int64_t>(), d);
    if (!s.is_number_unsigned())
      bad(source, "tensor '{}': shape {} has {} at dim {}, expected a non-negative integer", name,
          v.dump(), s.dump(), d);
    const uint64_t size = s.get<uint64_t>();
    if (size != 0 && (size > kMax || product > kMax / size))
      bad(source, "tensor '{}': the element count of shape {} overflows int64", name, v.dump());
    if (size != 0) product *= size;
    shape.push_back(static_cast<int64_t>(size));
  }
  return shape;
}

Entry read_entry(std::string_view source, const std::string& name, const json& entry, uint64_t buffer_bytes) {
  if (!entry.is_object())
    bad(source, "tensor '{}': entry is a JSON {}, expected an object with dtype, shape and data_offsets",
        name, entry.type_name());
  Entry e{name, read_dtype(source, name, entry), read_shape(source, name, entry), 0, 0};

  const json& off = field(source, name, entry, "data_offsets");
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    bad(source, "tensor '{}': field \"data_offsets\" is {}, expected [begin, end] of two non-negative integers",
        name, off.dump());
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  if (e.begin > e.end)
    bad(source, "tensor '{}': data_offsets [{}, {}] have begin > end", name, e.begin, e.end);
  if (e.end > buffer_bytes)
    bad(source, "tensor '{}': data_offsets [{}, {}] run past the end of the {}-byte data buffer; "
        "hint: the file is truncated", name, e.begin, e.end, buffer_bytes);

  // The byte count is checked before it is compared: [2^62] F32 would wrap to 0 bytes.
  const std::optional<int64_t> size = try_nbytes(e.shape, e.dtype);
  if (!size)
    bad(source, "tensor '{}': shape {} of {} needs more than 2^63 bytes, but data_offsets [{}, {}] hold {}", name,
        shape_str(e.shape), code_of(e.dtype).code, e.begin, e.end, e.end - e.begin);
  const uint64_t nbytes = static_cast<uint64_t>(*size);
  if (e.end - e.begin != nbytes)
    bad(source, "tensor '{}': data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {} bytes", name,
        e.begin, e.end, e.end - e.begin, shape_str(e.shape), code_of(e.dtype).code, nbytes);
  return e;
}

// The reference's rule: sorted by offset, each tensor starts where the last
// one ended and the last one ends at the end of the buffer.
void check_layout(std::string_view source, std::vector<Entry>& entries, uint64_t buffer_bytes) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered)
      bad(source, "tensor '{}': data_offsets [{}, {}] overlap tensor '{}' at [{}, {}]", e.name, e.begin,
          e.end, entries[i - 1].name, entries[i - 1].begin, entries[i - 1].end);
    if (e.begin > covered)
      bad(source, "bytes [{}, {}) of the data buffer belong to no tensor (gap before tensor '{}'); "
          "the format requires the tensors to cover the buffer exactly", covered, e.begin, e.name);
    covered = e.end;
  }
  if (covered != buffer_bytes)
    bad(source, "the data buffer has {} bytes but the tensors cover only the first {}; the format "
        "requires the tensors to cover the buffer exactly", buffer_bytes, covered);
}

Tensor copy_out(std::string_view source, const Entry& e, std::string_view buffer) {
  Tensor t = Tensor::empty(e.shape, e.dtype);
  const size_t nbytes = static_cast<size_t>(e.end - e.begin);
  if (nbytes == 0) return t;
  const char* src = buffer.data() + e.begin;
  if (e.dtype == DType::b8)
    for (size_t i = 0; i < nbytes; ++i)
      if (static_cast<unsigned char>(src[i]) > 1)
        bad(source, "tensor '{}': BOOL element {} is byte 0x{:02x}, expected 0 or 1", e.name, i,
            static_cast<unsigned char>(src[i]));
  std::memcpy(t.raw_data(), src, nbytes);
  return t;
}

// ---- files --------------------------------------------------------------------

[[noreturn]] void io_fail(std::string_view op, std::string_view what, const std::string& path, int err) {
  fail<IOError>(op, "{} '{}': {}", what, path, errno_text(err));
}

// Writes all of bytes to fd; returns 0 or the errno of the failing call.
int write_all(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return 0;
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata) {
  std::vector<const TensorMap::value_type*> layout;
  for (const auto& kv : tensors) {
    if (!kv.second.defined())
      fail<ValueError>("serialize_safetensors", "tensor '{}' is undefined", kv.first);
    if (kv.first == "__metadata__")
      fail<ValueError>("serialize_safetensors", "\"__metadata__\" is reserved and cannot name a tensor; "
                       "hint: pass metadata as the second argument");
    layout.push_back(&kv);
  }
  // The map is sorted by name; a stable sort keeps that order within a dtype.
  std::stable_sort(layout.begin(), layout.end(), [](const auto* a, const auto* b) {
    return code_of(a->second.dtype()).align_rank > code_of(b->second.dtype()).align_rank;
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* kv : layout) {
    const Tensor& t = kv->second;
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = code_of(t.dtype()).code;
    entry["shape"] = t.shape();
    entry["data_offsets"] = nlohmann::ordered_json::array({offset, offset + nbytes});
    header[kv->first] = std::move(entry);
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error& e) {
    fail<ValueError>("serialize_safetensors", "a tensor name or metadata string is not valid UTF-8 ({})",
                     e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + offset);
  append_u64_le(out, text.size());
  out += text;
  for (const auto* kv : layout) append_tensor_bytes(out, kv->second);
  return out;
}

SafetensorsData parse_safetensors(std::string_view bytes, std::string_view source) {
  if (bytes.size() < 8)
    bad(source, "the file is {} bytes, shorter than the 8-byte header length; hint: the file is "
        "truncated or not a safetensors file", bytes.size());
  const uint64_t n = read_u64_le(bytes.data());
  if (n > kMaxHeaderBytes)
    bad(source, "header length {} exceeds the {}-byte limit; hint: the file is corrupt or not a "
        "safetensors file", n, kMaxHeaderBytes);
  if (n > bytes.size() - 8)
    bad(source, "header length {} runs past the end of the file ({} bytes follow the length field); "
        "hint: the file is truncated", n, bytes.size() - 8);
  const json root = parse_header(source, bytes.substr(8, n));
  const std::string_view buffer = bytes.substr(8 + n);

  SafetensorsData out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__")
      out.metadata = read_metadata(source, value);
    else
      entries.push_back(read_entry(source, name, value, buffer.size()));
  }
  check_layout(source, entries, buffer.size());
  for (const Entry& e : entries) out.tensors.emplace(e.name, copy_out(source, e, buffer));
  return out;
}

Metadata load_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IOError>("safetensors", "{}: cannot open it", path);
  char length[8];
  if (!in.read(length, 8)) bad(path, "the file is shorter than the 8-byte header length; hint: the file is truncated");
  const uint64_t n = read_u64_le(length);
  if (n > kMaxHeaderBytes)
    bad(path, "header length {} exceeds the {}-byte limit; hint: the file is corrupt or not a safetensors file", n,
        kMaxHeaderBytes);
  std::string header(static_cast<size_t>(n), '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n)))
    bad(path, "header length {} runs past the end of the file; hint: the file is truncated", n);
  const json root = parse_header(path, header);
  const auto it = root.find("__metadata__");
  return it == root.end() ? Metadata{} : read_metadata(path, *it);
}

void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

SafetensorsData load_safetensors(const std::string& path) {
  return parse_safetensors(read_file_bytes(path), path);
}

namespace {

std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void too_big(const std::string& path, uint64_t max_bytes) {
  fail<IOError>("read_file_bytes", "'{}' is larger than the {}-byte limit for this input; hint: pass a smaller file",
                path, max_bytes);
}

}  // namespace

std::string read_file_bytes(const std::string& path, uint64_t max_bytes) {
  // A device may never end (/dev/zero, /dev/urandom) or block forever (a
  // tty): refused before it is opened, and checked again on the descriptor,
  // so the file checked is the file read. A FIFO is read like a file, up to
  // max_bytes (opening one waits for its writer, as cat does).
  struct stat st {};
  auto refuse_unless_file = [&](int fd) {
    if (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode)) return;
    if (fd >= 0) ::close(fd);
    fail<IOError>("read_file_bytes", "'{}' is {}, expected a file; hint: pass a regular file (or a pipe)", path,
                  file_kind(st.st_mode));
  };
  if (::stat(path.c_str(), &st) == 0) refuse_unless_file(-1);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("read_file_bytes", "cannot open", path, errno);
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    io_fail("read_file_bytes", "cannot read", path, err);
  }
  refuse_unless_file(fd);
  std::string out;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    if (static_cast<uint64_t>(st.st_size) > max_bytes) {
      ::close(fd);
      too_big(path, max_bytes);
    }
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char chunk[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      io_fail("read_file_bytes", "cannot read", path, err);
    }
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      too_big(path, max_bytes);
    }
    out.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) io_fail("write_file_atomic", "cannot create the temporary file for", path, errno);

  int err = write_all(fd, bytes);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;  // NFS reports some write errors only here
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail<IOError>("write_file_atomic", "cannot write '{}': {}; the previous file, if any, is unchanged",
                  path, errno_text(err));
  }

  // Make the rename itself durable. Some file systems cannot sync a directory (EINVAL).
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) io_fail("write_file_atomic", "wrote the file but cannot open its directory", dir, errno);
  err = ::fsync(dfd) != 0 && errno != EINVAL ? errno : 0;
  ::close(dfd);
  if (err != 0) io_fail("write_file_atomic", "wrote the file but cannot sync its directory", dir, err);
}

}  // namespace attograd
