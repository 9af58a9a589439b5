#include "launch/job_flags.h"

#include <cstdio>
#include <optional>
#include <string>
#include <variant>

#include "config/option_table.h"
#include "launch/exit_codes.h"
#include "util/printable.h"

namespace hoist::launch {
namespace {

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

// "the number of fill threads (1 to 1024, or 0: the default)"; "... (auto | cuda | host;
// default auto)".
std::string Help(const config::OptionInfo& o) {
  std::string h(o.help);
  std::string more;
  if (!o.choices.empty()) {
    more = std::string(o.choices);
  } else if (o.type == config::OptionType::kInt) {
    more = Number(o.lo) + " to " + Number(o.hi) + (o.zero_is_default ? ", or 0: the default" : "");
  } else if (o.type == config::OptionType::kDouble) {
    more = "above " + Number(o.lo) + ", at most " + Number(o.hi);
  }
  if (!o.default_is.empty() && o.default_is != "0") {
    more += std::string(more.empty() ? "" : "; ") + "default " + std::string(o.default_is);
  }
  return more.empty() ? h : h + " (" + more + ")";
}

// A flag that sets an optional only when given.
template <typename T>
CLI::Option* AddOptional(CLI::App* app, const std::string& name, std::optional<T>* out,
                         const std::string& help) {
  return app->add_option_function<T>(
      name, [out](const T& v) { *out = v; }, help);
}

CLI::Option* AddOptional(CLI::App* app, const std::string& name, std::optional<bool>* out,
                         const std::string& help) {
  const std::string no = "--no-" + name.substr(2);
  return app->add_flag_function(
      name + ",!" + no, [out](std::int64_t count) { *out = count > 0; }, help);
}

void AddOption(CLI::App* app, const config::OptionInfo& o, config::JobSpec* s) {
  std::visit([&](auto* field) { AddOptional(app, config::FlagName(o.name), field, Help(o)); },
             o.field(*s));
}

// Deprecated spellings: hidden, set the option they stand for and record their warning.
void AddDeprecated(CLI::App* app, config::JobSpec* s) {
  for (const config::Deprecated& d : config::kDeprecatedFlags) {
    const config::OptionInfo* o = config::FindOption(d.option);
    app->add_option_function<std::string>(
           std::string(d.old_spelling),
           [o, s, d](const std::string& v) {
             s->warnings.emplace_back(d.warning);
             // A string option: the conversion cannot fail.
             (void)config::SetOption(*o, v, std::string(d.old_spelling), s);
           },
           std::string(d.warning))
        ->group("");
  }
}

}  // namespace

void AddJobFlags(CLI::App* app, config::JobSpec* s, bool load_flags) {
  app->add_option("--topology", s->topology, "YAML topology file (flags override it)");
  for (const config::OptionInfo& o : config::kOptions) {
    if (o.plan) AddOption(app, o, s);
  }
  if (!load_flags) return;
  app->add_option("--rank", s->solo_rank, "without mpirun: which rank of the plan to run");
  for (const config::OptionInfo& o : config::kOptions) {
    if (!o.plan) AddOption(app, o, s);
  }
  AddDeprecated(app, s);
}

Result<config::ResolvedJob> ResolveJob(const config::JobSpec& spec) {
  Result<config::ResolvedJob> r = config::ResolveJobSpec(spec);
  if (r.ok() && PrintsSharedErrors()) {
    for (const std::string& w : r->warnings) {
      std::fprintf(stderr, "hoist: warning: %s\n", Printable(w).c_str());
    }
  }
  return r;
}

CLI::Validator LogLevels() {
  return CLI::IsMember(
      {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"});
}

}  // namespace hoist::launch
