#include "util/printable.h"

#include <cstdint>

namespace hoist {
namespace {

void Escape(unsigned char c, std::string* out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out->append({'\\', 'x', kHex[c >> 4], kHex[c & 0xF]});
}

// Length of the well-formed UTF-8 sequence starting at s[i] (2..4), or 0 when there is none.
// Sets *cp to its code point.
std::size_t Utf8Sequence(std::string_view s, std::size_t i, std::uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  std::size_t n;
  std::uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    return 0;  // ASCII is handled by the caller; 0x80-0xC1 and 0xF5-0xFF never start a sequence
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n;
}

bool IsHiddenControl(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string Printable(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      const bool control = c < 0x20 || c == 0x7F;
      if (control && !(keep_newlines && (c == '\n' || c == '\t'))) {
        Escape(c, &out);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t n = Utf8Sequence(s, i, &cp);
    if (n == 0) {
      Escape(c, &out);
      ++i;
      continue;
    }
    if (IsHiddenControl(cp)) {
      for (std::size_t k = 0; k < n; ++k) Escape(static_cast<unsigned char>(s[i + k]), &out);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace hoist
