#include "launch/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "launch/status_line.h"
#include "util/printable.h"
#include "util/terminal.h"

namespace hoist::launch {
namespace {

// %* in a pattern: the log message, escaped.
class PrintableMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string s = Printable(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PrintableMessage>();
  }
};

// spdlog pattern text: '%' doubled so a host name cannot inject a flag.
std::string PatternLiteral(const std::string& s) {
  std::string out;
  for (char c : Printable(s)) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

}  // namespace

std::unique_ptr<spdlog::formatter> PrintableFormatter(const std::string& pattern) {
  std::string p = pattern;
  for (std::size_t at = p.find("%v"); at != std::string::npos; at = p.find("%v", at + 2)) {
    if (at > 0 && p[at - 1] == '%') continue;  // "%%v" is a literal
    p[at + 1] = '*';
  }
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<PrintableMessage>('*').set_pattern(p);
  return f;
}

Status SetUpLogging(const std::string& level, int rank, const std::string& host) {
  const spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    return Status::InvalidArgument("--log-level '" + Printable(level) +
                                   "' is not one of trace, debug, info, warn, error, off");
  }
  spdlog::drop("hoist");
  // Records go through the status line, so none lands inside rank 0's progress bar.
  auto sink =
      WrapSink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>(
                   LogColoursAllowed() ? spdlog::color_mode::automatic : spdlog::color_mode::never),
               StderrStatusLine());
  auto logger = std::make_shared<spdlog::logger>("hoist", std::move(sink));
  spdlog::register_logger(logger);
  logger->set_formatter(PrintableFormatter("[%H:%M:%S.%e] [rank " + std::to_string(rank) + " " +
                                           PatternLiteral(host) + "] [%^%l%$] %v"));
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
  return Status::Ok();
}

}  // namespace hoist::launch
