#include "launch/status_line.h"

#include <utility>

namespace hoist::launch {
namespace {

class StatusLineSink : public spdlog::sinks::sink {
 public:
  StatusLineSink(std::shared_ptr<spdlog::sinks::sink> inner, std::shared_ptr<StatusLine> line)
      : inner_(std::move(inner)), line_(std::move(line)) {}

  void log(const spdlog::details::log_msg& msg) override {
    line_->Interrupt([&] {
      inner_->log(msg);
      inner_->flush();  // the record reaches the stream before the bar is drawn again
    });
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::shared_ptr<StatusLine> line_;
};

}  // namespace

void StatusLine::Show(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  text_ = text;
  showing_ = true;
  Draw();
}

void StatusLine::Finish(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  text_ = text;
  Draw();
  std::fputc('\n', out_);
  std::fflush(out_);
  showing_ = false;
}

void StatusLine::End() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!showing_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  showing_ = false;
}

void StatusLine::Draw() {
  std::fputs("\r", out_);
  std::fputs(text_.c_str(), out_);
  std::fputs("\033[K", out_);
  std::fflush(out_);
}

std::shared_ptr<spdlog::sinks::sink> WrapSink(std::shared_ptr<spdlog::sinks::sink> inner,
                                              std::shared_ptr<StatusLine> line) {
  return std::make_shared<StatusLineSink>(std::move(inner), std::move(line));
}

std::shared_ptr<StatusLine> StderrStatusLine() {
  static const std::shared_ptr<StatusLine> line = std::make_shared<StatusLine>(stderr);
  return line;
}

}  // namespace hoist::launch
