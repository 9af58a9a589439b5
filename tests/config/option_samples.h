// Test helpers for the option table (config/option_table.h): a valid value of each option that is
// not its default, derived from the entry itself (its choices, range, type), and the resolution of
// a value given through the table's own accessor, which every surface must reproduce.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/job_spec.h"
#include "config/option_table.h"

namespace hoist::testing {

inline std::vector<std::string> Choices(const config::OptionInfo& o) {
  std::vector<std::string> out;
  std::string_view rest = o.choices;
  while (!rest.empty()) {
    const std::size_t bar = rest.find(" | ");
    out.emplace_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? "" : rest.substr(bar + 3);
  }
  return out;
}

// A valid value of `o` other than its default, as text: the last choice that is not the default;
// for numbers the low end of the range (the next whole number when that is the default, 1.5
// above it for a double, whose low end is excluded); a bool's opposite; for the model,
// `other_model` (a folder that exists).
inline std::string SampleText(const config::OptionInfo& o, const std::string& other_model) {
  switch (o.type) {
    case config::OptionType::kString: {
      if (o.choices.empty()) return other_model;
      std::string pick;
      for (const std::string& c : Choices(o)) {
        if (c != o.default_is) pick = c;
      }
      return pick;
    }
    case config::OptionType::kInt: {
      long long v = static_cast<long long>(o.lo);
      if (std::to_string(v) == o.default_is) ++v;
      return std::to_string(v);
    }
    case config::OptionType::kDouble:
      return std::to_string(o.lo + 1.5);
    case config::OptionType::kBool:
      return o.default_is == "true" ? "false" : "true";
  }
  return "";
}

// DescribeJob of `spec` resolved, or the error's text.
inline std::string Resolved(const config::JobSpec& spec) {
  Result<config::ResolvedJob> r = config::ResolveJobSpec(spec);
  return r.ok() ? config::DescribeJob(r->job) : "error: " + r.status().ToString();
}

// The reference: option `o` set to `text` through the table's accessor, over `model`.
inline std::string ResolvedThroughTable(const config::OptionInfo& o, const std::string& text,
                                        const std::string& model) {
  config::JobSpec spec;
  spec.model = model;
  Status s = config::SetOption(o, text, "test", &spec);
  if (!s.ok()) return "error: " + s.ToString();
  return Resolved(spec);
}

}  // namespace hoist::testing
