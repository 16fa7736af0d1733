#include <gtest/gtest.h>

#include <attograd/autograd/error.h>
#include <attograd/data/tsv.h>
#include "test_util.h"

using namespace attograd;
using attograd::testing::error_message;

TEST(Tsv, ParsesHeaderRowsAndLineEnds) {
  const TsvTable t = parse_tsv("#n\ten\tfr\n71\tseventy-one\tsoixante et onze\r\n3\tthree\ttrois", 3);
  EXPECT_EQ(t.header, (std::vector<std::string>{"n", "en", "fr"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][2], "soixante et onze");
  EXPECT_EQ(t.rows[1][1], "three");
  EXPECT_EQ(t.line_numbers, (std::vector<int64_t>{2, 3}));
}

TEST(Tsv, EmptyTextHasNoRows) {
  EXPECT_TRUE(parse_tsv("", 2).rows.empty());
}

TEST(Tsv, BadInputsNameTheLine) {
  struct Case { std::string text, expect; };
  const std::vector<Case> cases = {
      {"a\tb\nc\n", "x:2: expected 2 tab-separated fields, found 1"},
      {"a\tb\n\nc\td\n", "x:2: empty line"},
      {"a\t\n", "x:1: field 2 is empty"},
      {std::string("a\tb\0c\n", 6), "x:1: NUL byte"},
      {"a\tb\xff\n", "x:1: invalid UTF-8 at column 4"},
      {"a\rb\tc\n", "x:1: stray carriage return"},
      {"a\tb\tc\n", "found 3"},
  };
  for (const auto& c : cases) {
    const std::string msg = error_message<IOError>([&] { parse_tsv(c.text, 2, "x"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "input " << ::testing::PrintToString(c.text) << " gave: " << msg;
  }
  EXPECT_NE(error_message<IOError>([] { read_tsv("/nonexistent/x.tsv", 2); }), "");
  EXPECT_NE(error_message<ValueError>([] { parse_tsv("a", 0); }), "");
}
