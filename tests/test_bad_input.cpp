// Bad input everywhere a user can reach it. Each program gets a table of bad
// flags and bad files (empty, binary garbage, truncated, edited, mismatched),
// and each must answer with exit code 2 and one clear line; each public loader
// gets the same files and must throw a typed attograd::Error (IOError). Never
// a crash, a hang or another exception type. tests/test_integration.cpp holds
// the first copy_task cases (unknown flags, missing values, resume with other
// flags, decode input); this file adds the rest. A new program (translate)
// gets its own TEST_F with its table, checked by expect_each_fails_cleanly.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include <attograd/autograd/io/safetensors.h>
#include <attograd/data/tsv.h>
#include <attograd/data/vocab.h>
#include "examples/common/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace attograd::app {
namespace {

using testing::error_message;

std::string garbage(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen() & 0xff);
  return s;
}

// A safetensors file with one metadata entry replaced (the tensors kept).
std::string with_metadata(const std::string& file, const std::string& key, const std::string& value) {
  SafetensorsData d = load_safetensors(file);
  d.metadata[key] = value;
  return serialize_safetensors(d.tensors, d.metadata);
}

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new testing::TempDir("bad_input");
    dir_ = tmp_->path;
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }
  static std::string write(const std::string& name, const std::string& bytes) {
    testing::write_text(path(name), bytes);
    return path(name);
  }
  static testing::TempDir* tmp_;
  static std::string dir_;
};
testing::TempDir* BadInput::tmp_ = nullptr;
std::string BadInput::dir_;

// ---- programs -------------------------------------------------------------------------------

struct ProgramCase {
  std::string name;
  std::vector<std::string> args;
  std::string phrase;  // must appear in the one stderr line
};

// Runs every case against `program` (a path in ATTOGRAD_BIN_DIR) and checks
// the contract: exit code 2, one line "<name>: error: ..." holding the phrase.
void expect_each_fails_cleanly(const std::string& name, const std::vector<ProgramCase>& cases,
                               const std::string& scratch) {
  const std::string program = std::string(ATTOGRAD_BIN_DIR) + "/" + name;
  for (const ProgramCase& c : cases) {
    SCOPED_TRACE(name + ": " + c.name);
    testing::expect_one_line_error(testing::run_program(program, c.args, scratch), name, c.phrase);
  }
}

const std::string kCopyTask = std::string(ATTOGRAD_BIN_DIR) + "/copy_task";
const std::vector<std::string> kTiny = {"--d-model", "16", "--heads", "2", "--d-ff", "32", "--enc-layers", "1",
                                        "--dec-layers", "1", "--max-len", "10", "--symbols", "5", "--min-length",
                                        "2", "--max-length", "6", "--samples", "0", "--threads", "1", "--quiet",
                                        "--warmup", "1", "--batch-size", "4", "--eval-size", "4"};

std::vector<std::string> tiny(std::vector<std::string> args) {
  args.insert(args.begin() + 1, kTiny.begin(), kTiny.end());
  return args;
}

TEST_F(BadInput, CopyTaskFlagsAndFilesGetExitCode2AndOneClearLine) {
  ASSERT_TRUE(fs::exists(kCopyTask)) << "build the copy_task target first";
  const std::string ck = path("ck");
  const auto t = testing::run_program(kCopyTask, tiny({"train", "--steps", "2", "--checkpoint-dir", ck}), dir_);
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string model = ck + "/step-00000002.model.safetensors", train = ck + "/step-00000002.train.safetensors";
  const std::string model_bytes = testing::read_text(model);

  const std::string empty = write("empty.model.safetensors", "");
  const std::string junk = write("junk.model.safetensors", garbage(3000, 7));
  const std::string half = write("half.model.safetensors", model_bytes.substr(0, model_bytes.size() / 2));
  const std::string text = write("notes.txt", "not a checkpoint\n");
  // A checkpoint whose train file is cut short, for --resume.
  fs::create_directories(path("cut"));
  fs::copy_file(model, path("cut/step-00000002.model.safetensors"));
  const std::string train_bytes = testing::read_text(train);
  write("cut/step-00000002.train.safetensors", train_bytes.substr(0, train_bytes.size() - 100));
  // Edited metadata: a vocab that does not fit the model, a task from another program, broken JSON.
  const std::string vocab6 = write("vocab6.model.safetensors",
                                   with_metadata(model, "vocab_src", R"(["<pad>","<bos>","<eos>","<unk>","a","b"])"));
  const std::string other = write("other.model.safetensors", with_metadata(model, "task", R"({"task":"translate"})"));
  const std::string broken = write("broken.model.safetensors", with_metadata(model, "config", "{\"d_model\": 16,"));
  const std::string noformat = write("noformat.model.safetensors", with_metadata(model, "format", "something-else"));

  const std::vector<ProgramCase> cases = {
      // flags: huge, negative, not numbers, unknown words
      {"huge integer", {"train", "--steps", "99999999999999999999999"}, "99999999999999999999999"},
      {"integer above its range", {"train", "--batch-size", "100000"}, "--batch-size must be in [1, 65536], got 100000"},
      {"huge float", {"train", "--lr", "1e400"}, "1e400"},
      {"lr above its range", {"train", "--lr", "1e7"}, "--lr must be in"},
      {"NaN float", {"train", "--dropout", "nan"}, "nan"},
      {"float for an integer", {"train", "--batch-size", "1e9"}, "1e9"},
      {"negative threads", {"train", "--threads", "-1"}, "--threads must be in [1, 256], got -1"},
      {"negative seed", {"train", "--seed", "-1"}, "-1"},
      {"negative max-len", {"train", "--max-len", "-1"}, "--max-len must be in [2, 65536], got -1"},
      {"negative symbols", {"train", "--symbols", "-3"}, "--symbols must be in [1, 10000], got -3"},
      {"huge symbols", {"train", "--symbols", "99999999999"}, "--symbols must be in [1, 10000], got 99999999999"},
      {"zero keep-last", {"train", "--keep-last", "0"}, "--keep-last must be in [1, 1000], got 0"},
      {"negative eval-size", {"eval", "--checkpoint", ck, "--eval-size", "-5"}, "--eval-size must be in"},
      {"empty mode", {""}, "unknown mode ''"},
      {"mode in capitals", {"TRAIN"}, "unknown mode 'TRAIN'"},
      {"unknown schedule", {"train", "--schedule", "bogus"}, "--schedule must be constant, warmup, cosine, noam, inverse-sqrt or step"},
      // files
      {"empty checkpoint file", {"eval", "--checkpoint", empty}, "the file is 0 bytes"},
      {"binary garbage checkpoint", {"eval", "--checkpoint", junk}, junk},
      {"truncated checkpoint", {"eval", "--checkpoint", half}, "the file is truncated"},
      {"truncated train file on resume", tiny({"train", "--steps", "4", "--checkpoint-dir", path("cut"), "--resume"}),
       "step-00000002.train.safetensors"},
      {"text file as checkpoint", {"eval", "--checkpoint", text}, text + " is not a checkpoint"},
      {"vocab in the checkpoint does not fit the model", {"decode", "--checkpoint", vocab6, "a b"},
       "metadata 'vocab_src' holds 6 tokens, but the model config says src_vocab 9"},
      {"checkpoint of another task", {"eval", "--checkpoint", other}, "is not a copy_task checkpoint: its task is 'translate'"},
      {"broken config JSON", {"eval", "--checkpoint", broken}, "metadata 'config' is not valid JSON"},
      {"not an attograd checkpoint", {"eval", "--checkpoint", noformat}, "is not an attograd checkpoint"},
      {"resume with another vocabulary", tiny({"train", "--steps", "4", "--checkpoint-dir", ck, "--resume", "--symbols", "7"}),
       "was trained with model config"},
      {"checkpoint dir that is a file", tiny({"train", "--steps", "2", "--checkpoint-dir", text}),
       "cannot create directory " + text},
      {"log in a missing directory", tiny({"train", "--steps", "2", "--log", path("no/such/dir/log.jsonl")}),
       "cannot open " + path("no/such/dir/log.jsonl")},
      {"sequence longer than max_len", {"decode", "--checkpoint", ck, "a b c d e a b c d e"},
       "sequence of 10 tokens exceeds the model's max_len 10"},
  };
  expect_each_fails_cleanly("copy_task", cases, dir_);
  // Nothing above touched the good checkpoint.
  EXPECT_EQ(testing::read_text(model), model_bytes);
  EXPECT_EQ(list_checkpoints(ck), std::vector<int64_t>{2});
}

// ---- library loaders -------------------------------------------------------------------------

struct LoaderCase {
  std::string name;
  std::string bytes;
  std::string phrase;
};

// Every loader on every bad file: an IOError naming the file.
TEST_F(BadInput, LoadersThrowIOErrorNamingTheFile) {
  const std::string st = serialize_safetensors({{"w", Tensor::ones({2, 3})}}, {{"k", "v"}});
  const std::vector<LoaderCase> common = {
      {"empty", "", ""},
      {"binary garbage", garbage(512, 1), ""},
      {"NUL bytes", std::string(64, '\0'), ""},
      {"truncated safetensors", st.substr(0, st.size() - 5), ""},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), ""},
  };
  struct Loader {
    std::string name;
    std::function<void(const std::string&)> load;
  };
  const std::vector<Loader> loaders = {
      {"load_safetensors", [](const std::string& p) { load_safetensors(p); }},
      {"Vocab::load", [](const std::string& p) { Vocab::load(p); }},
      {"read_tsv", [](const std::string& p) { read_tsv(p, 2); }},
      {"load_checkpoint", [](const std::string& p) { load_checkpoint(p, false); }},
  };
  for (const Loader& l : loaders)
    for (const LoaderCase& c : common) {
      // An empty TSV is a table with no rows (the program decides whether that
      // is enough data); every other loader needs content.
      if (l.name == "read_tsv" && c.bytes.empty()) {
        EXPECT_TRUE(read_tsv(write("empty.tsv", ""), 2).rows.empty());
        continue;
      }
      SCOPED_TRACE(l.name + " on " + c.name);
      const std::string file = write("bad.model.safetensors", c.bytes);
      const std::string msg = error_message<IOError>([&] { l.load(file); });
      EXPECT_NE(msg.find(file), std::string::npos) << (msg.empty() ? "no IOError" : msg);
    }
  for (const Loader& l : loaders) {
    SCOPED_TRACE(l.name + " on a missing file");
    const std::string msg = error_message<IOError>([&] { l.load(path("missing.model.safetensors")); });
    EXPECT_NE(msg.find("missing.model.safetensors"), std::string::npos) << (msg.empty() ? "no IOError" : msg);
  }
}

// Loader-specific bad content: still IOError, with the line or key.
TEST_F(BadInput, LoaderSpecificContentIsAnIOErrorWithTheLineOrKey) {
  const std::string sp = "<pad>\n<bos>\n<eos>\n<unk>\n";
  const std::vector<LoaderCase> vocab = {
      {"carriage return inside a token", sp + "a\rb\n", "line 5: token holds a carriage return"},
      {"CR CR LF", sp + "a\r\r\n", "line 5: token holds a carriage return"},
      {"specials out of order", "<bos>\n<pad>\n<eos>\n<unk>\n", "line 1: expected '<pad>'"},
      {"blank line", sp + "a\n\nb\n", "line 6: empty token"},
  };
  for (const LoaderCase& c : vocab) {
    SCOPED_TRACE("vocab: " + c.name);
    const std::string msg = error_message<IOError>([&] { Vocab::load(write("v.txt", c.bytes)); });
    EXPECT_NE(msg.find(c.phrase), std::string::npos) << (msg.empty() ? "no IOError" : msg);
  }
  const std::vector<LoaderCase> tsv = {
      {"three fields", "a\tb\tc\n", ":1: expected 2 tab-separated fields, found 3"},
      {"invalid UTF-8", "a\t\xff\n", ":1: invalid UTF-8"},
      {"empty field", "a\t\n", ":1: field 2 is empty"},
  };
  for (const LoaderCase& c : tsv) {
    SCOPED_TRACE("tsv: " + c.name);
    const std::string msg = error_message<IOError>([&] { read_tsv(write("t.tsv", c.bytes), 2); });
    EXPECT_NE(msg.find(c.phrase), std::string::npos) << (msg.empty() ? "no IOError" : msg);
  }
  // A train file whose step is a float, or missing the RNG state.
  const std::vector<std::pair<TensorMap, std::string>> train = {
      {{{"train.step", Tensor::scalar(3.0)}}, "missing or malformed 'train.step'"},
      {{{"train.step", Tensor::from_vector(std::vector<int64_t>{3}, {})},
        {"loader.epoch", Tensor::from_vector(std::vector<int64_t>{0}, {})},
        {"loader.position", Tensor::from_vector(std::vector<int64_t>{0}, {})},
        {"schedule.last_step", Tensor::from_vector(std::vector<int64_t>{3}, {})}},
       "missing or malformed 'rng.dropout'"},
  };
  for (const auto& [tensors, phrase] : train) {
    SCOPED_TRACE(phrase);
    const std::string msg = error_message<IOError>([&] { parse_train_progress(tensors, "t.train.safetensors"); });
    EXPECT_NE(msg.find(phrase), std::string::npos) << (msg.empty() ? "no IOError" : msg);
  }
}

}  // namespace
}  // namespace attograd::app
