#include "sbx/ascii.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sbx {
namespace {

struct NamedField {
  std::string name;
};

TEST(Ascii, FoldsOnlyAsciiLetters) {
  EXPECT_EQ(AsciiLower("Content-Length: 42 Z@[`"), "content-length: 42 z@[`");
  // Bytes above 0x7f are not letters here, whatever the locale: "\xC4" (Ä in Latin-1) stays.
  EXPECT_EQ(AsciiLower("\xC4X"), "\xC4x");
  EXPECT_FALSE(EqualsIgnoreCase("\xC4", "\xE4"));
}

TEST(Ascii, EqualsIgnoreCaseComparesWholeStrings) {
  EXPECT_TRUE(EqualsIgnoreCase("Keep-Alive", "keep-alive"));
  EXPECT_TRUE(EqualsIgnoreCase("", ""));
  EXPECT_FALSE(EqualsIgnoreCase("keep-alive", "keep-aliv"));
  EXPECT_FALSE(EqualsIgnoreCase("close", "clos e"));
  // '@' and '`' sit next to 'A' and 'a': no off-by-one folds them together.
  EXPECT_FALSE(EqualsIgnoreCase("@", "`"));
  EXPECT_FALSE(EqualsIgnoreCase("[", "{"));
}

TEST(Ascii, HttpTokenCharsAreRfc9110s) {
  for (char c : std::string("azAZ09!#$%&'*+-.^_`|~")) EXPECT_TRUE(IsHttpTokenChar(c)) << c;
  for (char c : std::string(" \t\"(),/:;<=>?@[\\]{}\x7f\x80\xff")) EXPECT_FALSE(IsHttpTokenChar(c)) << int(c);
  EXPECT_FALSE(IsHttpTokenChar('\0'));
}

TEST(Ascii, HasFieldNamedMatchesAnyCase) {
  std::vector<NamedField> fields = {{"Host"}, {"CONTENT-LENGTH"}};
  EXPECT_TRUE(HasFieldNamed(fields, "content-length"));
  EXPECT_TRUE(HasFieldNamed(fields, "host"));
  EXPECT_FALSE(HasFieldNamed(fields, "cache-control"));
  EXPECT_FALSE(HasFieldNamed(std::vector<NamedField>{}, "host"));
}

}  // namespace
}  // namespace sbx
