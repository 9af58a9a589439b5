#include "planner/strict_json.h"

#include <cstddef>
#include <exception>
#include <iterator>
#include <new>
#include <utility>
#include <vector>

#include "util/printable.h"

namespace hoist::planner::internal {
namespace {

using json = nlohmann::json;

// An input iterator over the text that records the address of the last byte the lexer read, so
// that the SAX handler knows where in the input it is (nlohmann does not tell it).
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

// Where the parser is: one frame per open container.
struct Frame {
  nlohmann::json* value = nullptr;  // the container being filled
  std::string key;                  // the key whose value is being parsed (objects only)
};

std::string PathOf(const std::vector<Frame>& stack) {
  // The frames below the innermost one name where the innermost container lives.
  std::string path;
  for (std::size_t i = 0; i + 1 < stack.size(); ++i) {
    path += "/";
    path += stack[i].value->is_object() ? QuoteForMessage(stack[i].key, 120) : "[]";
  }
  return path.empty() ? "the top level" : path;
}

// nlohmann's messages quote the input ("last read: ..."): made printable as all of hoist's
// output is (hoist::Printable) and kept short, since the input is hostile.
std::string SanitizeParserMessage(std::string_view what) {
  constexpr std::size_t kMaxLen = 300;
  std::string out = Printable(what.substr(0, kMaxLen));
  if (what.size() > kMaxLen) out += "...";
  return out;
}

}  // namespace

std::string QuoteForMessage(std::string_view s, std::size_t max_len) {
  // Quotes and backslashes are escaped so the quoted name reads unambiguously; every byte that
  // could drive a terminal is escaped as Printable does for all of hoist's output.
  const std::string_view head = s.substr(0, max_len);
  std::string quoted;
  quoted.reserve(head.size() + 2);
  for (char c : head) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  std::string out = "\"" + Printable(quoted) + "\"";
  if (head.size() < s.size()) out += "...(" + std::to_string(s.size()) + " bytes)";
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

namespace {

// A SAX handler that builds the DOM like nlohmann's own, but refuses duplicate keys and deep
// nesting. (nlohmann's parser-callback mode cannot be used: it rescans the parent object on
// every object end, which is quadratic in the number of tensors.)
class StrictDomBuilder {
 public:
  StrictDomBuilder(int max_depth, const char* const* last_read, const char* text_begin,
                   std::uint64_t base_offset)
      : max_depth_(max_depth),
        last_read_(last_read),
        text_begin_(text_begin),
        base_offset_(base_offset) {}

  bool null() { return Add(nullptr); }
  bool boolean(bool v) { return Add(v); }
  bool number_integer(json::number_integer_t v) { return Add(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Add(v); }
  bool number_float(json::number_float_t v, const std::string& /*text*/) { return Add(v); }
  bool string(json::string_t& v) { return Add(std::move(v)); }
  bool binary(json::binary_t& v) { return Add(json::binary(std::move(v))); }
  bool start_object(std::size_t /*elements*/) { return Open(json::value_t::object); }
  bool start_array(std::size_t /*elements*/) { return Open(json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(json::string_t& k) {
    Frame& frame = stack_.back();
    if (frame.value->contains(k)) {
      error_ = "duplicate key " + QuoteForMessage(k) + " in the object at " + PathOf(stack_) +
               " (ending at byte " + std::to_string(Offset()) +
               "; JSON readers disagree on which value wins)";
      return false;
    }
    frame.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*token*/,
                   const nlohmann::detail::exception& e) {
    parse_error_ = true;
    error_position_ = position;
    error_ = e.what();
    return false;
  }

  json& root() { return root_; }
  bool is_parse_error() const { return parse_error_; }
  std::size_t error_position() const { return error_position_; }
  const std::string& error() const { return error_; }

 private:
  std::uint64_t Offset() const {
    return base_offset_ + static_cast<std::uint64_t>(*last_read_ - text_begin_);
  }

  // Places `v` in the current container (or as the root) and returns where it lives.
  json* Place(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& frame = stack_.back();
    if (frame.value->is_array()) {
      frame.value->push_back(std::move(v));
      return &frame.value->back();
    }
    json& slot = (*frame.value)[frame.key];
    slot = std::move(v);
    return &slot;
  }

  bool Add(json&& v) {
    Place(std::move(v));
    return true;
  }

  bool Open(json::value_t type) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      error_ = "JSON nested deeper than " + std::to_string(max_depth_) + " levels at byte " +
               std::to_string(Offset()) + " (under " + PathOf(stack_) + "/...)";
      return false;
    }
    json* container = Place(json(type));
    stack_.push_back(Frame{container, {}});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  const int max_depth_;
  const char* const* last_read_;
  const char* text_begin_;
  const std::uint64_t base_offset_;
  json root_;
  std::vector<Frame> stack_;
  bool parse_error_ = false;
  std::size_t error_position_ = 0;
  std::string error_;
};

}  // namespace

Result<json> ParseStrictJson(std::string_view label, std::string_view text, int max_depth,
                             std::uint64_t base_offset) {
  // nlohmann's lexer takes a NUL byte for the end of input, so "{...}\0garbage" would parse; no
  // JSON text holds a raw NUL (strings escape control characters), so one anywhere is an error.
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return Status::Corrupt(std::string(label) + ": invalid JSON at byte " +
                           std::to_string(base_offset + nul) +
                           ": a NUL byte (only whitespace may follow a JSON value)");
  }
  const char* last_read = text.data();
  StrictDomBuilder builder(max_depth, &last_read, text.data(), base_offset);
  try {
    TrackingIterator first(text.data(), &last_read);
    TrackingIterator last(text.data() + text.size(), &last_read);
    if (json::sax_parse(first, last, &builder, json::input_format_t::json, /*strict=*/true,
                        /*ignore_comments=*/false)) {
      return std::move(builder.root());
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(std::string(label) + ": out of memory parsing " +
                                     std::to_string(text.size()) + " bytes of JSON");
  } catch (const std::exception& e) {
    return Status::Corrupt(std::string(label) +
                           ": invalid JSON: " + SanitizeParserMessage(e.what()));
  }
  if (!builder.is_parse_error())
    return Status::Corrupt(std::string(label) + ": " + builder.error());
  // nlohmann counts the characters read, the end of input included.
  const std::size_t position = builder.error_position();
  const std::uint64_t at = base_offset + (position > 0 ? position - 1 : 0);
  const char* what = position > text.size() ? "invalid or truncated JSON" : "invalid JSON";
  return Status::Corrupt(std::string(label) + ": " + what + " at byte " + std::to_string(at) +
                         ": " + SanitizeParserMessage(builder.error()));
}

}  // namespace hoist::planner::internal
