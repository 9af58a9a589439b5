#include "config/option_table.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "util/printable.h"

namespace hoist::config {
namespace {

const char* Takes(OptionType type) {
  switch (type) {
    case OptionType::kInt:
      return "a whole number";
    case OptionType::kDouble:
      return "a number";
    case OptionType::kBool:
      return "true or false";
    case OptionType::kString:
      break;
  }
  return "a string";
}

Status NotConverted(const OptionInfo& info, std::string_view text, const std::string& where) {
  return Status::InvalidArgument(where + " '" + Printable(text) + "' is not valid: " +
                                 std::string(info.name) + " takes " + Takes(info.type));
}

}  // namespace

const OptionInfo* FindOption(std::string_view name) {
  for (const OptionInfo& o : kOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string FlagName(std::string_view name) {
  std::string flag = "--" + std::string(name);
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

Status SetOption(const OptionInfo& info, std::string_view text, const std::string& where,
                 JobOptionSet* set) {
  const OptionField field = info.field(*set);
  if (auto* s = std::get_if<std::optional<std::string>*>(&field)) {
    **s = std::string(text);
  } else if (auto* i = std::get_if<std::optional<int>*>(&field)) {
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
      return NotConverted(info, text, where);
    }
    **i = v;
  } else if (auto* d = std::get_if<std::optional<double>*>(&field)) {
    const std::string copy(text);
    char* end = nullptr;
    const double v = std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size()) return NotConverted(info, text, where);
    **d = v;
  } else if (auto* b = std::get_if<std::optional<bool>*>(&field)) {
    if (text == "true" || text == "1") {
      **b = true;
    } else if (text == "false" || text == "0") {
      **b = false;
    } else {
      return NotConverted(info, text, where);
    }
  }
  return Status::Ok();
}

std::string OptionText(const OptionInfo& info, JobOptionSet& set) {
  const OptionField field = info.field(set);
  if (auto* s = std::get_if<std::optional<std::string>*>(&field)) return (*s)->value_or("");
  if (auto* i = std::get_if<std::optional<int>*>(&field)) {
    return **i ? std::to_string(***i) : "";
  }
  if (auto* d = std::get_if<std::optional<double>*>(&field)) {
    if (!**d) return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", ***d);
    return buf;
  }
  const auto* b = std::get_if<std::optional<bool>*>(&field);
  return **b ? (***b ? "true" : "false") : "";
}

}  // namespace hoist::config
