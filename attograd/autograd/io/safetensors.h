// safetensors: the Hugging Face tensor file format, read and written without
// pickle or any Python. A file is
//
//   [8 bytes]  N, the header length, little-endian u64
//   [N bytes]  UTF-8 JSON object:
//                {"__metadata__": {"key": "value", ...},          (optional, string -> string)
//                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//              padded with spaces so that 8 + N is a multiple of 8
//   [rest]     the byte buffer: every tensor row-major, little-endian, packed;
//              data_offsets are relative to the buffer start, end exclusive.
//
// Supported dtypes: F32, F64, I64, BOOL (DType::b8, one byte 0 or 1 each),
// BF16 (DType::bf16, the bits as stored, any pattern).
//
// Writing follows the reference implementation (huggingface/safetensors) byte
// for byte: tensors laid out by descending dtype alignment (I64, F64, F32,
// BF16, BOOL), then by name, so 8-byte data stays 8-byte aligned for mmap readers;
// the JSON is compact, keys in layout order, "__metadata__" first when present.
//
// Reading copies every tensor into a fresh contiguous tensor and validates
// everything first, as the reference does: the tensors' offset ranges, sorted,
// must tile the whole buffer with no gap, no overlap and nothing left over.
// Every problem is an IOError "safetensors: <source>: <what> ..." that names
// the tensor when there is one. Unknown fields inside an entry are ignored
// (as the reference does); a "__metadata__": null is read as no metadata.
//
// Nothing in a file is trusted: the header is at most 100 MB and names at
// most 100,000 tensors, it is parsed in linear time, a repeated key is
// refused, every shape's element and byte counts are computed without
// overflow and must equal the tensor's span of the buffer, and spans may not
// overlap. docs/reliability.md says how this is fuzzed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <attograd/autograd/tensor.h>

namespace attograd {

// Tensors by name, as a file stores them.
using TensorMap = std::map<std::string, Tensor>;
// The file's "__metadata__": string keys and values.
using Metadata = std::map<std::string, std::string>;

// A parsed file: its tensors and its metadata.
struct SafetensorsData {
  TensorMap tensors;  // every tensor in the file, by name
  Metadata metadata;  // the "__metadata__" entries; empty when the file has none
};

// The whole file as bytes. Views and non-contiguous tensors are written in
// logical row-major order. An empty `metadata` writes no "__metadata__" key.
std::string serialize_safetensors(const TensorMap& tensors, const Metadata& metadata = {});

// Parse a whole file held in memory; `source` names it in error messages.
SafetensorsData parse_safetensors(std::string_view bytes, std::string_view source = "<memory>");

// serialize_safetensors + write_file_atomic.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const Metadata& metadata = {});
// read_file_bytes + parse_safetensors: the tensors and metadata of the file at
// path; a missing file or a malformed one is an IOError naming path.
SafetensorsData load_safetensors(const std::string& path);
// The "__metadata__" of the file at path, from its header alone (the tensors
// are not read), with the header's checks; IOError naming path.
Metadata load_safetensors_metadata(const std::string& path);

// Replace the file at `path` with `bytes` so that a crash or a failed write
// never leaves a half-written file: write "<path>.tmp.<pid>", fsync it, rename
// it over `path`, fsync the directory. On any failure (disk full, file size
// limit, missing directory, ...) the temp file is removed and an IOError names
// the path and the system's reason; whatever was at `path` before is untouched.
// Writers in one process must not target the same path concurrently.
void write_file_atomic(const std::string& path, std::string_view bytes);

// read_file_bytes' default bound: far above any file attograd writes, far
// below what would exhaust a machine's memory on its way there.
constexpr uint64_t kReadFileLimit = uint64_t{16} << 30;  // 16 GiB

// The whole file at `path`; IOError names the path and the system's reason.
// A file larger than max_bytes, a directory and a device (/dev/zero,
// /dev/urandom: inputs that never end) are refused with an IOError; a pipe is
// read up to max_bytes.
std::string read_file_bytes(const std::string& path, uint64_t max_bytes = kReadFileLimit);

}  // namespace attograd
