// Strict JSON parsing for untrusted input (planner-internal; used by safetensors.cc and
// checkpoint.cc only).
//
// nlohmann::json is lenient in ways that hide corruption: it keeps the last of duplicate object
// keys silently, and it throws. ParseStrictJson catches every exception and returns
// Status::Corrupt naming the label and the byte offset, rejects duplicate keys at any depth, and
// bounds the nesting depth (so hostile input cannot make the DOM arbitrarily deep).
//
// Threading: pure function, no shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "hoist/status.h"

namespace hoist::planner::internal {

// Parses `text` as one JSON value (surrounding whitespace allowed). `label` names the file in
// errors; `base_offset` is added to every byte offset reported (e.g. 8 for a safetensors header,
// so offsets are file offsets). Containers nested deeper than `max_depth` (top level = 1) are an
// error.
Result<nlohmann::json> ParseStrictJson(std::string_view label, std::string_view text, int max_depth,
                                       std::uint64_t base_offset);

// `s` quoted for an error message: quotes and backslashes escaped, then made printable as
// hoist::Printable does (\xNN, upper-case hex), cut after `max_len` bytes.
std::string QuoteForMessage(std::string_view s, std::size_t max_len = 200);

// "string", "number", "array", ... for "wrong type" messages.
std::string_view JsonTypeName(const nlohmann::json& value);

}  // namespace hoist::planner::internal
