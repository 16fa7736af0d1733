// safetensors I/O: round trips, exact byte layout, every rejection of a bad
// file, atomic writes under a failing disk, and files shared with the Python
// writer/reader in tools/safetensors_io.py.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/autograd.h>
#include "test_util.h"

using namespace attograd;
namespace fs = std::filesystem;

namespace {

// Runs fn and checks it throws E with every one of `parts` in the message.
template <class E = IOError, class F>
::testing::AssertionResult throws_with(F&& fn, const std::vector<std::string_view>& parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (std::string_view p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw the wrong type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

std::string u64_le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file from a header text and data bytes, no padding.
std::string file_of(const std::string& header, const std::string& data = "") {
  return u64_le(header.size()) + header + data;
}

// Parses `header` + `data` as "bad.st" and checks the IOError names the file and `parts`.
::testing::AssertionResult rejects(const std::string& header, const std::string& data,
                                   std::vector<std::string_view> parts) {
  parts.push_back("safetensors: bad.st: ");
  return throws_with([&] { parse_safetensors(file_of(header, data), "bad.st"); }, parts);
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(got.is_contiguous());
  EXPECT_FALSE(got.requires_grad());
  if (want.dtype() == DType::b8)
    EXPECT_EQ(got.to_vector<bool>(), want.to_vector<bool>());
  else if (want.dtype() == DType::i64)
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
  else
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

// Tests that use files get a fresh directory under /tmp, removed afterwards.
class SafetensorsFiles : public ::testing::Test {
 protected:
  attograd::testing::TempDir tmp_{"st"};
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir = tmp_.path;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

const char* kPython = "/usr/bin/python3";
const std::string kSourceDir = ATTOGRAD_SOURCE_DIR;

}  // namespace

// ---- round trips ----------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtypeAndShape) {
  Generator gen(3);
  const std::vector<Shape> shapes = {{}, {0}, {1}, {5}, {2, 0, 3}, {2, 3, 4}};
  TensorMap tensors;
  for (size_t s = 0; s < shapes.size(); ++s) {
    const Shape& shape = shapes[s];
    tensors["f32." + std::to_string(s)] = Tensor::randn(shape, gen, DType::f32);
    tensors["f64." + std::to_string(s)] = Tensor::randn(shape, gen, DType::f64);
    std::vector<int64_t> ints;
    std::vector<bool> bools;
    for (int64_t i = 0; i < shape_numel(shape); ++i) {
      ints.push_back((i % 2 ? -1 : 1) * (i << 40));
      bools.push_back(i % 3 == 1);
    }
    tensors["i64." + std::to_string(s)] = Tensor::from_vector(ints, shape);
    tensors["b8." + std::to_string(s)] = Tensor::from_vector(bools, shape);
  }
  tensors["special"] = Tensor::from_vector(std::vector<double>{INFINITY, -INFINITY, -0.0, 1e-310}, {4}, DType::f64);

  const SafetensorsData back = parse_safetensors(serialize_safetensors(tensors));
  EXPECT_EQ(back.tensors.size(), tensors.size());
  EXPECT_TRUE(back.metadata.empty());
  for (const auto& [name, t] : tensors) expect_same(back.tensors.at(name), t, name);
  EXPECT_TRUE(std::signbit(back.tensors.at("special").to_vector<double>()[2]));

  Tensor nan = Tensor::from_list({NAN}, {1});
  EXPECT_TRUE(std::isnan(parse_safetensors(serialize_safetensors({{"n", nan}})).tensors.at("n").item()));
}

TEST(Safetensors, NonContiguousViewsAreWrittenInLogicalOrder) {
  Generator gen(5);
  Tensor base = Tensor::randn({3, 4, 5}, gen, DType::f64);
  Tensor ib = Tensor::arange(0, 24, 1, DType::i64).reshape({4, 6});
  TensorMap views = {
      {"transpose", base.transpose(0, 2)},
      {"permute", base.permute({1, 2, 0})},
      {"step", base.slice(2, 1, 5, 2)},
      {"narrow", base.narrow(1, 1, 2)},                  // contiguous rows, but an offset
      {"expand", Tensor::from_list({1, 2, 3}, {3, 1}).expand({3, 4})},  // stride 0
      {"int_t", ib.transpose(0, 1)},
      {"bool_t", Tensor::from_vector(std::vector<bool>{true, false, false, true, true, false}, {2, 3}).transpose(0, 1)},
  };
  for (const auto& [name, v] : views)
    if (name != "narrow") {
      EXPECT_FALSE(v.is_contiguous()) << name;
    }
  Tensor leaf = base.transpose(0, 1).detach().requires_grad_();
  views["leaf"] = leaf;

  const SafetensorsData back = parse_safetensors(serialize_safetensors(views));
  for (const auto& [name, t] : views) expect_same(back.tensors.at(name), t, name);
  EXPECT_FALSE(leaf.grad_fn());  // writing records nothing
}

TEST(Safetensors, MetadataRoundTrip) {
  const Metadata meta = {{"format", "pt"}, {"epoch", "12"}, {"", "empty key"}, {"unicode", "\u00e9\u4e2d \"q\" \\ \n\t\x01"}};
  TensorMap t = {{"x", Tensor::ones({2})}};
  SafetensorsData back = parse_safetensors(serialize_safetensors(t, meta));
  EXPECT_EQ(back.metadata, meta);
  back = parse_safetensors(serialize_safetensors({}, meta));
  EXPECT_EQ(back.metadata, meta);
  EXPECT_TRUE(back.tensors.empty());
}

TEST_F(SafetensorsFiles, SaveAndLoadFile) {
  const std::string path = (dir / "model.safetensors").string();
  TensorMap t = {{"w", Tensor::from_list({1, 2, 3, 4}, {2, 2})}, {"step", Tensor::scalar(7, DType::i64)}};
  save_safetensors(path, t, {{"k", "v"}});
  SafetensorsData back = load_safetensors(path);
  expect_same(back.tensors.at("w"), t["w"], "w");
  expect_same(back.tensors.at("step"), t["step"], "step");
  EXPECT_EQ(back.metadata, (Metadata{{"k", "v"}}));
  EXPECT_EQ(entries(), std::vector<std::string>{"model.safetensors"});

  EXPECT_TRUE(throws_with([&] { load_safetensors((dir / "missing.safetensors").string()); },
                          {"missing.safetensors", "No such file or directory"}));
  spit(dir / "short.safetensors", "abc");
  EXPECT_TRUE(throws_with([&] { load_safetensors((dir / "short.safetensors").string()); },
                          {"short.safetensors", "3 bytes, shorter than the 8-byte header length"}));
}

// ---- exact bytes ----------------------------------------------------------------

TEST(Safetensors, ByteLayoutMatchesHandComputedFile) {
  // "b" (I64) is laid out before "a" (F32): larger alignment first, then name.
  TensorMap t = {{"a", Tensor::from_list({1.0, 2.0}, {2})}, {"b", Tensor::scalar(7, DType::i64)}};
  const std::string json =
      R"({"__metadata__":{"k":"v"},"b":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})";
  // 26 bytes up to "b", 52 for b's entry, 54 for a's; padded with 4 spaces to 136 = 0x88.
  ASSERT_EQ(json.size(), 132u);
  const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + json + std::string(4, ' ') +
                               std::string("\x07\0\0\0\0\0\0\0", 8) +        // int64 7
                               std::string("\0\0\x80\x3f\0\0\0\x40", 8);     // float 1, 2
  EXPECT_EQ(serialize_safetensors(t, {{"k", "v"}}), expected);
}

TEST(Safetensors, ByteLayoutMatchesReferenceImplementation) {
  // The reference writer's own examples: one F32 tensor whose header needs no
  // padding, an empty file, and an empty file with metadata.
  Tensor attn = Tensor::from_list({0, 1, 2, 3, 4, 5}, {1, 2, 3});
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  std::string data;
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) data.append(reinterpret_cast<const char*>(&v), 4);
  EXPECT_EQ(serialize_safetensors({{"attn.0", attn}}), u64_le(64) + header + data);

  EXPECT_EQ(serialize_safetensors({}), u64_le(8) + "{}      ");
  EXPECT_EQ(serialize_safetensors({}, {{"framework", "pt"}}),
            u64_le(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, ReaderAcceptsAnyTensorOrderAndUnpaddedHeader) {
  // Tensors listed out of offset order, no padding, an extra unknown field.
  const std::string header =
      R"({"z":{"dtype":"BOOL","shape":[2],"data_offsets":[4,6]},)"
      R"("y":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1},"__metadata__":null})";
  float one = 1;
  const std::string data = std::string(reinterpret_cast<const char*>(&one), 4) + std::string("\x01\x00", 2);
  SafetensorsData d = parse_safetensors(file_of(header, data));
  EXPECT_EQ(d.tensors.at("y").item(), 1.0);
  EXPECT_EQ(d.tensors.at("z").to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_TRUE(d.metadata.empty());
}

TEST(Safetensors, WriterRejectsBadInput) {
  EXPECT_TRUE(throws_with<ValueError>([] { serialize_safetensors({{"x", Tensor()}}); }, {"'x'", "undefined"}));
  EXPECT_TRUE(throws_with<ValueError>([] { serialize_safetensors({{"__metadata__", Tensor::ones({1})}}); },
                                      {"reserved"}));
  EXPECT_TRUE(throws_with<ValueError>([] { serialize_safetensors({{"bad\xff", Tensor::ones({1})}}); },
                                      {"not valid UTF-8"}));
}

// ---- rejections ---------------------------------------------------------------

TEST(SafetensorsReject, FileAndHeaderLength) {
  EXPECT_TRUE(throws_with([] { parse_safetensors("", "bad.st"); }, {"bad.st", "0 bytes, shorter than"}));
  EXPECT_TRUE(throws_with([] { parse_safetensors(std::string(7, '\0'), "bad.st"); }, {"7 bytes"}));
  EXPECT_TRUE(throws_with([] { parse_safetensors(u64_le(100) + "{}", "bad.st"); },
                          {"bad.st", "header length 100 runs past the end of the file (2 bytes"}));
  EXPECT_TRUE(throws_with([] { parse_safetensors(u64_le(~uint64_t{0}) + "{}", "bad.st"); },
                          {"header length 18446744073709551615 exceeds the 100000000-byte limit"}));
  EXPECT_TRUE(throws_with([] { parse_safetensors(u64_le(uint64_t{1} << 40) + "{}", "bad.st"); }, {"exceeds"}));
}

TEST(SafetensorsReject, BadJson) {
  EXPECT_TRUE(rejects("", "", {"must be a JSON object", "an empty header"}));
  EXPECT_TRUE(rejects(R"({"a":)", "", {"not valid JSON"}));
  EXPECT_TRUE(rejects(R"({"a":{}} trailing)", "", {"not valid JSON"}));
  EXPECT_TRUE(rejects(R"([1, 2])", "", {"must be a JSON object", "0x5b"}));
  EXPECT_TRUE(rejects(R"(  {})", "", {"must be a JSON object"}));  // the reference requires '{' first
  EXPECT_TRUE(rejects("\xef\xbb\xbf{}", "", {"must be a JSON object"}));  // BOM
  EXPECT_TRUE(rejects("{\"a\xff\":1}", "", {"not valid JSON"}));  // invalid UTF-8
  // nlohmann stops at a NUL byte as if the input ended; the reference rejects it.
  EXPECT_TRUE(rejects(std::string("{}\0\0", 4), "", {"NUL byte at header offset 2"}));
  EXPECT_TRUE(rejects(std::string("{}\0{\"junk\"", 10), "", {"NUL byte at header offset 2"}));
}

TEST(SafetensorsReject, EntryFields) {
  const std::string d8(8, '\0');
  EXPECT_TRUE(rejects(R"({"a":5})", "", {"tensor 'a'", "entry is a JSON number, expected an object"}));
  EXPECT_TRUE(rejects(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "missing field \"dtype\""}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8, {"tensor 'a'", "missing field \"shape\""}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[2]}})", d8, {"tensor 'a'", "missing field \"data_offsets\""}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", d8,
                      {"tensor 'a'", "\"dtype\" is a JSON number, expected a string"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", d8,
                      {"tensor 'a'", "\"shape\" is a JSON string"}));
  for (const char* off : {R"("0,8")", "[0]", "[0,8,8]", R"([0,"8"])", "[-1,8]", "[0,8.0]", "{}"})
    EXPECT_TRUE(rejects(fmt::format(R"({{"a":{{"dtype":"F32","shape":[2],"data_offsets":{}}}}})", off), d8,
                        {"tensor 'a'", "\"data_offsets\" is", "expected [begin, end]"}))
        << off;
}

TEST(SafetensorsReject, Dtype) {
  const std::string d8(8, '\0');
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", d8,
                      {"tensor 'a'", "unknown dtype \"F99\""}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", d8, {"unknown dtype \"f32\""}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", d8,
                      {"tensor 'a'", "dtype F16 is not supported by attograd"}));
}

TEST(SafetensorsReject, Shape) {
  const std::string d8(8, '\0');
  auto h = [](const char* shape) {
    return fmt::format(R"({{"a":{{"dtype":"F32","shape":{},"data_offsets":[0,8]}}}})", shape);
  };
  EXPECT_TRUE(rejects(h("[-1,-2]"), d8, {"tensor 'a'", "negative size -1 at dim 0"}));
  EXPECT_TRUE(rejects(h("[2.5]"), d8, {"tensor 'a'", "has 2.5 at dim 0, expected a non-negative integer"}));
  EXPECT_TRUE(rejects(h("[1,2.0]"), d8, {"at dim 1, expected a non-negative integer"}));
  EXPECT_TRUE(rejects(h("[true]"), d8, {"has true at dim 0"}));
  EXPECT_TRUE(rejects(h("[\"2\"]"), d8, {"expected a non-negative integer"}));
  EXPECT_TRUE(rejects(h("[18446744073709551616]"), d8, {"expected a non-negative integer"}));  // 2^64
  EXPECT_TRUE(rejects(h("[4294967296,4294967296]"), d8, {"tensor 'a'", "overflows int64"}));
  EXPECT_TRUE(rejects(h("[9223372036854775808]"), d8, {"overflows int64"}));  // 2^63
  // Zero elements, but strides would still overflow.
  EXPECT_TRUE(rejects(h("[0,4294967296,4294967296]"), d8, {"overflows int64"}));
  // Fits int64 as a count, but not as bytes of F32 (2^64 bytes wrapped to 0 before: probe B2).
  EXPECT_TRUE(rejects(h("[4611686018427387904]"), d8, {"shape [4611686018427387904] of F32 needs more than 2^63 bytes", "hold 8"}));
}

TEST(SafetensorsReject, Offsets) {
  const std::string d8(8, '\0');
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", d8,
                      {"tensor 'a'", "data_offsets [0, 12] run past the end of the 8-byte data buffer"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d8,
                      {"tensor 'a'", "[8, 4] have begin > end"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8,
                      {"tensor 'a'", "hold 8 bytes but shape [3] of F32 needs 12 bytes"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,0]}})", "",
                      {"tensor 'a'", "hold 0 bytes but shape [] of F32 needs 4"}));
  const std::string d12(12, '\0');
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", d12,
                      {"tensor 'b'", "[4, 12] overlap tensor 'a' at [0, 8]"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8,
                      {"tensor 'b'", "overlap tensor 'a'"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", d12,
                      {"bytes [4, 8) of the data buffer belong to no tensor (gap before tensor 'b')"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8,
                      {"bytes [0, 4)", "gap before tensor 'a'"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8,
                      {"the data buffer has 8 bytes but the tensors cover only the first 4"}));
  EXPECT_TRUE(rejects("{}", "x", {"the data buffer has 1 bytes but the tensors cover only the first 0"}));
  // Empty tensors may share an offset, also with the tensor that follows.
  SafetensorsData ok = parse_safetensors(file_of(
      R"({"e1":{"dtype":"F64","shape":[0],"data_offsets":[0,0]},"e2":{"dtype":"I64","shape":[3,0],"data_offsets":[0,0]},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8));
  EXPECT_EQ(ok.tensors.at("e2").shape(), (Shape{3, 0}));
}

TEST(SafetensorsReject, DuplicateNames) {
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  const std::string d4(4, '\0');
  EXPECT_TRUE(rejects(R"({"a":)" + e + R"(,"a":)" + e + "}", d4, {"tensor 'a' appears more than once"}));
  EXPECT_TRUE(rejects(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", d4,
                      {"key 'dtype' appears more than once inside 'a'"}));
  EXPECT_TRUE(rejects(R"({"__metadata__":{"k":"1","k":"2"},"a":)" + e + "}", d4,
                      {"key 'k' appears more than once inside '__metadata__'"}));
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_safetensors(file_of(R"({"__metadata__":{"dtype":"x"},"a":)" + e + "}", d4)));
}

// Probe B2: [2^62] F32 needs 2^64 bytes, which wrapped to 0 and matched an
// empty span; [2^61] F64 likewise. Both are refused before any copy.
TEST(SafetensorsReject, ByteCountThatWrapsAroundIsRefused) {
  EXPECT_TRUE(rejects(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", "",
                      {"tensor 'w'", "needs more than 2^63 bytes", "hold 0"}));
  EXPECT_TRUE(rejects(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", "",
                      {"tensor 'w'", "needs more than 2^63 bytes"}));
  EXPECT_TRUE(rejects(R"({"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", "",
                      {"tensor 'w'", "needs more than 2^63 bytes"}));
  // Zero elements stay zero bytes whatever the other sizes are.
  EXPECT_NO_THROW(parse_safetensors(file_of(R"({"e":{"dtype":"F32","shape":[4611686018427387904,0],"data_offsets":[0,0]}})")));
}

// A header naming n tensors of shape [0] (valid entries, all at offset 0).
std::string many_entries_header(size_t n) {
  std::string h = "{";
  for (size_t i = 0; i < n; ++i)
    h += fmt::format(R"({}"z{}":{{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", i ? "," : "", i);
  return h + "}";
}

// Probe B9: nlohmann's callback parser was quadratic (40k entries 12 s);
// tests/test_fuzz_regressions.cpp times the linear parse. Here: a header of
// 40,000 entries parses, and one past 100,000 tensors is refused.
TEST(SafetensorsReject, ManyEntriesAreReadAndBounded) {
  EXPECT_EQ(parse_safetensors(file_of(many_entries_header(40'000))).tensors.size(), 40'000u);
  const std::string too_many = many_entries_header(100'001);
  EXPECT_TRUE(throws_with([&] { parse_safetensors(file_of(too_many), "many.st"); },
                          {"many.st", "more than 100000 tensors"}));
}

TEST(SafetensorsFilesReject, DevicesDirectoriesAndOversizedFiles) {
  EXPECT_TRUE(throws_with([] { read_file_bytes("/dev/zero"); }, {"'/dev/zero' is a character device"}));
  EXPECT_TRUE(throws_with([] { read_file_bytes("/dev/urandom"); }, {"character device"}));
  EXPECT_TRUE(throws_with([] { load_safetensors("/tmp"); }, {"'/tmp' is a directory"}));
  attograd::testing::TempDir dir("read_bound");
  const std::string f = dir / "ten.txt";
  std::ofstream(f) << "0123456789";
  EXPECT_EQ(read_file_bytes(f, 10), "0123456789");
  EXPECT_TRUE(throws_with([&] { read_file_bytes(f, 9); }, {"larger than the 9-byte limit"}));
  // A pipe is read up to the bound, then refused (an endless writer cannot exhaust memory).
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const pid_t writer = fork();
  if (writer == 0) {
    const int fd = open(fifo.c_str(), O_WRONLY);
    const std::string block(4096, 'x');
    for (int i = 0; i < 64; ++i)
      if (write(fd, block.data(), block.size()) < 0) break;
    _exit(0);
  }
  EXPECT_TRUE(throws_with([&] { read_file_bytes(fifo, 100'000); }, {"larger than the 100000-byte limit"}));
  kill(writer, SIGKILL);
  waitpid(writer, nullptr, 0);
}

TEST(SafetensorsReject, Metadata) {
  EXPECT_TRUE(rejects(R"({"__metadata__":{"epoch":12}})", "",
                      {"\"__metadata__\" key 'epoch' has a JSON number value (12), expected a string"}));
  EXPECT_TRUE(rejects(R"({"__metadata__":{"k":null}})", "", {"key 'k' has a JSON null value"}));
  EXPECT_TRUE(rejects(R"({"__metadata__":["a"]})", "", {"\"__metadata__\" is a JSON array, expected an object"}));
}

TEST(SafetensorsReject, BoolBytesMustBeZeroOrOne) {
  EXPECT_TRUE(rejects(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3),
                      {"tensor 'm'", "BOOL element 2 is byte 0x02, expected 0 or 1"}));
}

// Every truncation and every single-byte corruption of a valid file either
// parses or throws IOError; under ASan this also shows no read goes out of bounds.
TEST(SafetensorsReject, TruncationsAndCorruptionsNeverCrash) {
  TensorMap t = {{"w", Tensor::from_list({1, 2, 3}, {3})},
                 {"i", Tensor::from_vector(std::vector<int64_t>{5}, {1})},
                 {"m", Tensor::from_vector(std::vector<bool>{true}, {})}};
  const std::string good = serialize_safetensors(t, {{"k", "v"}});
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_THROW(parse_safetensors(std::string_view(good).substr(0, n)), IOError) << n;
  size_t parsed = 0;
  for (size_t i = 0; i < good.size(); ++i)
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ x);
      try {
        parse_safetensors(bad);
        ++parsed;
      } catch (const IOError&) {
      }
    }
  EXPECT_GT(parsed, 0u);  // flips inside float data or metadata text still parse
}

// ---- atomic writes ------------------------------------------------------------

TEST_F(SafetensorsFiles, WriteFileAtomicReplacesAndLeavesNoTemp) {
  const std::string path = (dir / "f.bin").string();
  write_file_atomic(path, "first");
  write_file_atomic(path, std::string("second\0x", 8));
  EXPECT_EQ(slurp(path), std::string("second\0x", 8));
  write_file_atomic(path, "");
  EXPECT_EQ(slurp(path), "");
  EXPECT_EQ(entries(), std::vector<std::string>{"f.bin"});
}

TEST_F(SafetensorsFiles, WriteFileAtomicNamesPathAndReason) {
  const std::string path = (dir / "no_such_dir" / "f.bin").string();
  EXPECT_TRUE(throws_with([&] { write_file_atomic(path, "x"); }, {path, "No such file or directory"}));
  fs::create_directory(dir / "a_dir");
  // rename() refuses to put a file over a non-empty directory; the temp file goes away.
  spit(dir / "a_dir" / "inside", "x");
  EXPECT_TRUE(throws_with([&] { write_file_atomic((dir / "a_dir").string(), "x"); },
                          {"a_dir", "Is a directory", "the previous file, if any, is unchanged"}));
  EXPECT_EQ(entries(), std::vector<std::string>{"a_dir"});
}

// A full disk, simulated with a 1 KiB file size limit in a child process:
// write() fails with EFBIG, the error names the path, the old file survives.
TEST_F(SafetensorsFiles, WriteFileAtomicKeepsOldFileWhenDiskIsFull) {
  const std::string path = (dir / "model.safetensors").string();
  TensorMap old = {{"w", Tensor::ones({4})}};
  save_safetensors(path, old);
  const std::string old_bytes = slurp(path);

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{};
    ::getrlimit(RLIMIT_FSIZE, &lim);
    lim.rlim_cur = 1024;
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      save_safetensors(path, {{"w", Tensor::ones({4096})}});
    } catch (const IOError& e) {
      const std::string msg = e.what();
      const bool ok = msg.find(path) != std::string::npos && msg.find("File too large") != std::string::npos;
      if (!ok) fmt::print(stderr, "unexpected message: {}\n", msg);
      ::_exit(ok ? 0 : 1);
    }
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong message, 2: no error";
  EXPECT_EQ(slurp(path), old_bytes);
  EXPECT_EQ(entries(), std::vector<std::string>{"model.safetensors"});  // no temp file left
  expect_same(load_safetensors(path).tensors.at("w"), old["w"], "w");
}

// ---- files shared with tools/safetensors_io.py ----------------------------------

namespace {
TensorMap fixture_tensors() {
  return {
      {"weight", Tensor::from_list({0.5, -1.25, 3.0, 1024.0, -0.0, 6.103515625e-05}, {2, 3})},
      {"bias", Tensor::from_list({0.1, -2.5, 1e300}, {3}, DType::f64)},
      {"index", Tensor::from_vector(std::vector<int64_t>{0, -1, int64_t{1} << 40, INT64_MIN}, {2, 2})},
      {"mask", Tensor::from_vector(std::vector<bool>{true, false, true, true, false}, {5})},
      {"scalar", Tensor::scalar(3.5, DType::f64)},
      {"empty", Tensor::zeros({0, 4})},
      {"layer.0/w\u00e9", Tensor::from_vector(std::vector<int64_t>{7}, {1})},
  };
}
const Metadata kFixtureMetadata = {{"format", "pt"}, {"note", "written by tools/safetensors_io.py"}};
}  // namespace

// tests/fixtures/safetensors_py.safetensors was written by
// tests/fixtures/make_safetensors_fixture.py (pure Python).
TEST(SafetensorsPython, CommittedFixtureReadsAndMatchesCppWriterByteForByte) {
  const std::string path = kSourceDir + "/tests/fixtures/safetensors_py.safetensors";
  const SafetensorsData d = load_safetensors(path);
  const TensorMap want = fixture_tensors();
  EXPECT_EQ(d.tensors.size(), want.size());
  for (const auto& [name, t] : want) expect_same(d.tensors.at(name), t, name);
  EXPECT_TRUE(std::signbit(d.tensors.at("weight").to_vector<float>()[4]));
  EXPECT_EQ(d.metadata, kFixtureMetadata);
  EXPECT_EQ(serialize_safetensors(want, kFixtureMetadata), read_file_bytes(path));
}

// torch tensors (incl. a non-contiguous one) written by the Python writer,
// then the C++ writer's file read back by the Python reader.
TEST_F(SafetensorsFiles, PythonTorchWriterAndPythonReader) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found";
  const std::string py_file = (dir / "from_py.safetensors").string();
  const std::string script = (dir / "write.py").string();
  spit(script, fmt::format(R"(
import sys
sys.path.insert(0, "{}/tools")
try:
    import torch
except ImportError:
    sys.exit(77)
import safetensors_io as st
st.save(sys.argv[1], {{
    "t": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
    "d": torch.tensor([[1.5, -2.0]], dtype=torch.float64),
    "i": torch.tensor(-(2**62), dtype=torch.int64),
    "b": torch.tensor([True, False, True]),
    "e": torch.zeros(0, 2),
    "h": torch.tensor([1.0, -2.5, 3.14159], dtype=torch.bfloat16),
}}, {{"framework": "pt"}})
)", kSourceDir));
  const int rc = std::system(fmt::format("{} -B {} {}", kPython, script, py_file).c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "torch is not installed for " << kPython;
  ASSERT_EQ(rc, 0);

  const SafetensorsData d = load_safetensors(py_file);
  expect_same(d.tensors.at("t"), Tensor::from_list({0, 3, 1, 4, 2, 5}, {3, 2}), "t");
  expect_same(d.tensors.at("d"), Tensor::from_list({1.5, -2.0}, {1, 2}, DType::f64), "d");
  expect_same(d.tensors.at("i"), Tensor::scalar(-4611686018427387904.0, DType::i64), "i");
  expect_same(d.tensors.at("b"), Tensor::from_vector(std::vector<bool>{true, false, true}, {3}), "b");
  expect_same(d.tensors.at("e"), Tensor::zeros({0, 2}), "e");
  ASSERT_EQ(d.tensors.at("h").dtype(), DType::bf16);  // 3.14159 rounds to bf16 0x4049 = 3.140625
  EXPECT_EQ(d.tensors.at("h").to_vector<double>(), (std::vector<double>{1.0, -2.5, 3.140625}));
  EXPECT_EQ(d.metadata, (Metadata{{"framework", "pt"}}));

  // The other way: C++ writes, the Python reader checks every value.
  const std::string cpp_file = (dir / "from_cpp.safetensors").string();
  save_safetensors(cpp_file, fixture_tensors(), kFixtureMetadata);
  const std::string check = (dir / "check.py").string();
  spit(check, fmt::format(R"(
import sys
sys.path.insert(0, "{0}/tools")
sys.path.insert(0, "{0}/tests/fixtures")
import safetensors_io as st
import make_safetensors_fixture as fx
tensors, metadata = st.load(sys.argv[1])
assert metadata == fx.metadata, metadata
assert tensors == fx.tensors, tensors
assert tensors["index"].tolist() == [[0, -1], [2**40, -(2**63)]]
assert tensors["scalar"].tolist() == 3.5
)", kSourceDir));
  EXPECT_EQ(std::system(fmt::format("{} -B {} {}", kPython, check, cpp_file).c_str()), 0);

  // bf16 from C++: the Python reader widens the same values, and torch gets the same bits.
  const std::string bf16_file = (dir / "bf16.safetensors").string();
  save_safetensors(bf16_file, {{"h", Tensor::from_list({1.0, -2.5, 3.14159, 1e-40}, {2, 2}).to(DType::bf16)}});
  const std::string check_bf16 = (dir / "check_bf16.py").string();
  spit(check_bf16, fmt::format(R"(
import sys
sys.path.insert(0, "{0}/tools")
import safetensors_io as st
import torch
h = st.load(sys.argv[1])[0]["h"]
assert h.dtype == "BF16" and h.shape == (2, 2), h
want = torch.tensor([[1.0, -2.5], [3.14159, 1e-40]]).to(torch.bfloat16)
assert h.tolist() == want.float().tolist(), (h.tolist(), want)
assert torch.equal(h.to_torch().view(torch.int16), want.view(torch.int16))
)", kSourceDir));
  EXPECT_EQ(std::system(fmt::format("{} -B {} {}", kPython, check_bf16, bf16_file).c_str()), 0);
}
