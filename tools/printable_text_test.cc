#include "edgeshare/tools/printable_text.h"

#include <gtest/gtest.h>

#include <string>

namespace edgeshare {
namespace tools {
namespace {

TEST(PrintableTextTest, KeepsPrintableAsciiAndUtf8) {
  EXPECT_EQ(printable_text("foundation.ptd: key 'w' not found"), "foundation.ptd: key 'w' not found");
  EXPECT_EQ(printable_text("caf\xc3\xa9/\xe2\x82\xac.pte"), "caf\xc3\xa9/\xe2\x82\xac.pte");
}

TEST(PrintableTextTest, EscapesControlBytesAndInvalidUtf8) {
  EXPECT_EQ(printable_text(std::string("a\nb\tc\x1b[31m\x7f", 11)), "a\\x0ab\\x09c\\x1b[31m\\x7f");
  EXPECT_EQ(printable_text(std::string("\x00\xff\xc3", 3)), "\\x00\\xff\\xc3");
  // Overlong forms and surrogates are not UTF-8 either.
  EXPECT_EQ(printable_text("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");
}

TEST(PrintableTextTest, CutsLongTextAtACharacter) {
  EXPECT_EQ(printable_text(std::string(10, 'x'), 4), "xxxx...");
  EXPECT_EQ(printable_text("\xc3\xa9\xc3\xa9\xc3\xa9", 3), "\xc3\xa9\xc3\xa9...");
}

}  // namespace
}  // namespace tools
}  // namespace edgeshare
