// Printable (util/printable.h) against hand-written expectations: what passes through unchanged,
// what is escaped, and that the output of any byte string is valid UTF-8 without a control byte.
#include "util/printable.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace hoist {
namespace {

using namespace std::string_literals;

// An independent check of the output contract: strict UTF-8 decoding (Python's rules) and no
// C0/C1/DEL code point.
bool ValidPrintableUtf8(const std::string& s, bool newlines_allowed) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    const std::uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    const bool newline = cp == '\n' || cp == '\t';
    if ((cp < 0x20 && !(newlines_allowed && newline)) || (cp >= 0x7F && cp <= 0x9F)) return false;
    i += n;
  }
  return true;
}

TEST(Printable, OrdinaryTextIsUnchanged) {
  for (const std::string& s :
       {""s, "model.layers.0.self_attn.o_proj.weight"s, "/data/qwen3-4b/model-00001.safetensors"s,
        "a\\b \"quoted\" 100%"s, "caf\xC3\xA9 \xE6\xA8\xA1\xE5\x9E\x8B \xF0\x9F\x98\x80"s}) {
    EXPECT_EQ(Printable(s), s);
  }
}

TEST(Printable, ControlBytesAreEscaped) {
  EXPECT_EQ(Printable("w\x1b[31mred\x1b[0m"), "w\\x1B[31mred\\x1B[0m");
  EXPECT_EQ(Printable("a\nb\tc\rd"), "a\\x0Ab\\x09c\\x0Dd");
  EXPECT_EQ(Printable("a\nb\tc\rd", /*keep_newlines=*/true), "a\nb\tc\\x0Dd");
  EXPECT_EQ(Printable("nul\0end"s), "nul\\x00end");
  EXPECT_EQ(Printable("\x7f"), "\\x7F");
  EXPECT_EQ(Printable("\xC2\x9B"
                      "2J"),
            "\\xC2\\x9B2J");  // C1 CSI
  EXPECT_EQ(Printable("abc\xE2\x80\xAE"
                      "fed"),
            "abc\\xE2\\x80\\xAEfed");            // right-to-left override
  EXPECT_EQ(Printable("\xC2\xA0"), "\xC2\xA0");  // U+00A0 just above the C1 range is printable
}

TEST(Printable, InvalidUtf8IsEscapedBytewise) {
  EXPECT_EQ(Printable("\xff\xfe"), "\\xFF\\xFE");
  EXPECT_EQ(Printable("\x80x"), "\\x80x");                           // stray continuation byte
  EXPECT_EQ(Printable("\xC3"), "\\xC3");                             // truncated at the end
  EXPECT_EQ(Printable("\xE6\xA8x"), "\\xE6\\xA8x");                  // truncated in the middle
  EXPECT_EQ(Printable("\xC0\xAF"), "\\xC0\\xAF");                    // overlong '/'
  EXPECT_EQ(Printable("\xE0\x80\xAF"), "\\xE0\\x80\\xAF");           // overlong, 3 bytes
  EXPECT_EQ(Printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");           // a surrogate
  EXPECT_EQ(Printable("\xF4\x90\x80\x80"), "\\xF4\\x90\\x80\\x80");  // above U+10FFFF
}

TEST(Printable, AnyBytesComeOutValidAndPrintable) {
  std::mt19937_64 rng(12345);
  for (int round = 0; round < 2000; ++round) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) {
      // Bias towards the interesting ranges: controls, UTF-8 lead and continuation bytes.
      const std::uint64_t r = rng();
      c = static_cast<char>(r % 3 == 0   ? (r >> 8) % 0x20
                            : r % 3 == 1 ? 0x80 + (r >> 8) % 0x80
                                         : (r >> 8) % 0x100);
    }
    for (bool keep : {false, true}) {
      const std::string p = Printable(s, keep);
      EXPECT_TRUE(ValidPrintableUtf8(p, keep)) << "input round " << round;
      EXPECT_EQ(Printable(p, keep), p);  // already printable: a fixed point
    }
  }
}

}  // namespace
}  // namespace hoist
