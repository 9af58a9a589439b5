#include "planner/strict_json.h"

#include <cstddef>
#include <exception>
#include <iterator>
#include <new>
#include <unordered_set>
#include <utility>
#include <vector>

namespace hoist::planner::internal {
namespace {

using json = nlohmann::json;

// An input iterator over the text that records the address of the last byte the lexer read, so
// that the parser callback knows where in the input it is (nlohmann does not tell it).
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** last_read) : p_(p), last_read_(last_read) {}
  const char& operator*() const {
    *last_read_ = p_;
    return *p_;
  }
  TrackingIterator& operator++() {
    ++p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** last_read_;
};

// Thrown by the parser callback, caught in ParseStrictJson: never leaves this file.
struct StrictJsonError {
  std::string message;
};

struct Frame {
  bool is_object = false;
  std::unordered_set<std::string> keys;
  std::string key;  // the key whose value is being parsed (objects only)
};

std::string PathOf(const std::vector<Frame>& stack) {
  // The frames below the innermost one name where the innermost container lives.
  std::string path;
  for (std::size_t i = 0; i + 1 < stack.size(); ++i) {
    path += "/";
    path += stack[i].is_object ? QuoteForMessage(stack[i].key, 120) : "[]";
  }
  return path.empty() ? "the top level" : path;
}

// nlohmann's messages quote the input ("last read: ..."): escape what is not printable ASCII
// and keep them short, since the input is hostile.
std::string SanitizeParserMessage(std::string_view what) {
  static constexpr char kHex[] = "0123456789abcdef";
  constexpr std::size_t kMaxLen = 300;
  std::string out;
  for (std::size_t i = 0; i < what.size() && i < kMaxLen; ++i) {
    const auto c = static_cast<unsigned char>(what[i]);
    if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (what.size() > kMaxLen) out += "...";
  return out;
}

}  // namespace

std::string QuoteForMessage(std::string_view s, std::size_t max_len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const std::size_t n = s.size() < max_len ? s.size() : max_len;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  if (n < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string_view JsonTypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
      return "negative integer";
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "floating-point number";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

Result<json> ParseStrictJson(std::string_view label, std::string_view text, int max_depth,
                             std::uint64_t base_offset) {
  const char* last_read = text.data();
  auto offset_of = [&](const char* p) {
    return base_offset + static_cast<std::uint64_t>(p - text.data());
  };
  std::vector<Frame> stack;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (static_cast<int>(stack.size()) >= max_depth) {
          throw StrictJsonError{"JSON nested deeper than " + std::to_string(max_depth) +
                                " levels at byte " + std::to_string(offset_of(last_read)) +
                                " (under " + PathOf(stack) + "/...)"};
        }
        stack.push_back(Frame{event == json::parse_event_t::object_start, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        if (stack.empty() || !parsed.is_string()) break;  // cannot happen with nlohmann's parser
        Frame& frame = stack.back();
        std::string key = parsed.get<std::string>();
        if (!frame.keys.insert(key).second) {
          throw StrictJsonError{"duplicate key " + QuoteForMessage(key) + " in the object at " +
                                PathOf(stack) + " (ending at byte " +
                                std::to_string(offset_of(last_read)) +
                                "; JSON readers disagree on which value wins)"};
        }
        frame.key = std::move(key);
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };

  try {
    TrackingIterator first(text.data(), &last_read);
    TrackingIterator last(text.data() + text.size(), &last_read);
    return json::parse(first, last, callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const StrictJsonError& e) {
    return Status::Corrupt(std::string(label) + ": " + e.message);
  } catch (const json::parse_error& e) {
    const std::uint64_t at = base_offset + (e.byte > 0 ? e.byte - 1 : 0);
    const char* what =
        text.empty() || e.byte >= text.size() ? "invalid or truncated JSON" : "invalid JSON";
    return Status::Corrupt(std::string(label) + ": " + what + " at byte " + std::to_string(at) +
                           ": " + SanitizeParserMessage(e.what()));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(label) + ": out of memory parsing " +
                                     std::to_string(text.size()) + " bytes of JSON");
  } catch (const std::exception& e) {
    return Status::Corrupt(std::string(label) +
                           ": invalid JSON: " + SanitizeParserMessage(e.what()));
  }
}

}  // namespace hoist::planner::internal
