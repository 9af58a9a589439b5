// The public entry points of include/hoist/hoist.h's last section over the internals: the job
// options by name (config/option_table.h), a dry-run resolution (embed/resolve_options.h), hub ids
// (planner/hub.h) and logging set-up (util/terminal.h). Failure: Status, as the header says.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "config/job_spec.h"
#include "config/option_table.h"
#include "embed/resolve_options.h"
#include "hoist/hoist.h"
#include "planner/hub.h"
#include "util/printable.h"
#include "util/suggest.h"
#include "util/terminal.h"

namespace hoist {
namespace {

JobOptionType PublicType(config::OptionType t) {
  switch (t) {
    case config::OptionType::kString:
      return JobOptionType::kString;
    case config::OptionType::kInt:
      return JobOptionType::kInt;
    case config::OptionType::kDouble:
      return JobOptionType::kDouble;
    case config::OptionType::kBool:
      return JobOptionType::kBool;
  }
  return JobOptionType::kString;
}

const char* TypeWord(JobOptionType t) {
  static const char* kWords[] = {"a string", "a whole number", "a number", "a bool"};
  return kWords[static_cast<int>(t)];
}

// JobOptionValue's alternatives are in JobOptionType's order.
const char* ValueWord(const JobOptionValue& v) {
  return TypeWord(static_cast<JobOptionType>(v.index()));
}

// `value` into `field`, when its type is the field's (an int64 also fills a double).
Status Assign(const config::OptionInfo& info, const JobOptionValue& value,
              config::OptionField field) {
  const std::string name(info.name);
  if (auto* s = std::get_if<std::optional<std::string>*>(&field)) {
    if (auto* v = std::get_if<std::string>(&value)) {
      **s = *v;
      return Status::Ok();
    }
  } else if (auto* i = std::get_if<std::optional<int>*>(&field)) {
    if (auto* v = std::get_if<std::int64_t>(&value)) {
      if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
        return Status::InvalidArgument("option " + name + ": " + std::to_string(*v) +
                                       " is beyond an int");
      }
      **i = static_cast<int>(*v);
      return Status::Ok();
    }
  } else if (auto* d = std::get_if<std::optional<double>*>(&field)) {
    if (const double* v = std::get_if<double>(&value)) {
      **d = *v;
      return Status::Ok();
    }
    if (const std::int64_t* v = std::get_if<std::int64_t>(&value)) {
      **d = static_cast<double>(*v);
      return Status::Ok();
    }
  } else if (auto* b = std::get_if<std::optional<bool>*>(&field)) {
    if (auto* v = std::get_if<bool>(&value)) {
      **b = *v;
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("option " + name + " takes " + TypeWord(PublicType(info.type)) +
                                 ", not " + ValueWord(value));
}

}  // namespace

const std::vector<JobOptionInfo>& JobOptions() {
  static const std::vector<JobOptionInfo> rows = [] {
    std::vector<JobOptionInfo> out;
    for (const config::OptionInfo& o : config::kOptions) {
      out.push_back({o.name, PublicType(o.type), o.plan, o.help, o.choices, o.default_is, o.lo,
                     o.hi, o.zero_is_default});
    }
    return out;
  }();
  return rows;
}

const JobOptionInfo* FindJobOption(std::string_view name) {
  for (const JobOptionInfo& o : JobOptions()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string NearestJobOption(std::string_view name) {
  std::vector<std::string> names;
  for (const config::OptionInfo& o : config::kOptions) names.emplace_back(o.name);
  return Nearest(name, names);
}

Status SetJobOption(JobOptionSet* options, std::string_view name, const JobOptionValue& value) {
  const config::OptionInfo* info = config::FindOption(name);
  if (info == nullptr) {
    const std::string near = NearestJobOption(name);
    return Status::InvalidArgument("unknown option '" + Printable(name) + "'" +
                                   (near.empty() ? "" : " (did you mean '" + near + "'?)"));
  }
  return Assign(*info, value, info->field(*options));
}

Result<std::string> DescribeLoad(const LoadOptions& options) {
  Result<config::ResolvedJob> r = internal::ResolveLoadOptions(options);
  if (!r.ok()) return r.status();
  return config::DescribeJob(r->job);
}

Result<std::string> ResolveModel(const std::string& model) {
  return planner::ResolveModelPath(model, planner::HubEnv::FromProcess());
}

void LogToStdout() {
  if (spdlog::get("hoist") != nullptr) return;  // the program's own, or an earlier call's
  spdlog::set_default_logger(spdlog::stdout_color_mt(
      "hoist", LogColoursAllowed() ? spdlog::color_mode::automatic : spdlog::color_mode::never));
}

}  // namespace hoist
