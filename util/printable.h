// Escaping untrusted strings for display: tensor names, file names, YAML keys, host names, error
// messages. Whatever bytes come in, what comes out is valid UTF-8 with no control character, so
// printing it cannot drive a terminal (ANSI escapes), forge log lines or make a JSON writer throw.
//
// Escaped as \xNN (two upper-case hex digits) per byte: C0 controls (0x00-0x1F, except '\n' and
// '\t' when keep_newlines), DEL (0x7F), the C1 controls U+0080-U+009F, the bidirectional format
// controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and every byte that is not part
// of a well-formed UTF-8 sequence (stray continuation bytes, truncated or overlong sequences,
// surrogates, code points above U+10FFFF). Everything else, backslashes included, is copied as is:
// this is for display, not a reversible encoding.
//
// Failure: none. Ownership: returns a new string. Threading: pure function.
#pragma once

#include <string>
#include <string_view>

namespace hoist {

std::string Printable(std::string_view s, bool keep_newlines = false);

}  // namespace hoist
