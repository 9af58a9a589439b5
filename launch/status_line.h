// The one line at the bottom of a terminal that rank 0's progress bar redraws in place, shared
// with the log: a log record written while the bar shows first clears the bar's line, then the
// bar is drawn again below the record, so no record is ever written into the bar.
//
// Ownership: StatusLine writes to a FILE* it does not own (stderr in the CLI). The sink made by
// WrapSink shares the StatusLine (shared_ptr) with whoever draws the bar.
// Threading: every member is safe from any thread (one mutex orders the bar and the records).
// Failure: none; write errors on the stream are ignored, as spdlog's own sinks do.
#pragma once

#include <spdlog/sinks/sink.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace hoist::launch {

class StatusLine {
 public:
  explicit StatusLine(std::FILE* out) : out_(out) {}

  // Draws `text` in place of the line shown so far (nothing is kept on screen of the old one).
  void Show(const std::string& text);
  // Draws `text` a last time and ends its line: records written later go below it.
  void Finish(const std::string& text);
  // Ends the line shown as it is (nothing when none shows): for the last words of a process.
  void End();

  // Runs `write` (which writes whole lines to the same stream) with the bar's line cleared
  // first and drawn again after it.
  template <typename F>
  void Interrupt(F&& write) {
    std::lock_guard<std::mutex> lock(mu_);
    if (showing_) std::fputs("\r\033[K", out_);
    write();
    if (showing_) Draw();
  }

 private:
  void Draw();  // mu_ held

  std::FILE* out_;
  std::mutex mu_;
  std::string text_;
  bool showing_ = false;
};

// A sink that writes through `inner` (which must write to the same stream as `line`) and keeps
// the status line below its records.
std::shared_ptr<spdlog::sinks::sink> WrapSink(std::shared_ptr<spdlog::sinks::sink> inner,
                                              std::shared_ptr<StatusLine> line);

// The CLI's status line on stderr (made on first use; shared by the logger and the bar).
std::shared_ptr<StatusLine> StderrStatusLine();

}  // namespace hoist::launch
