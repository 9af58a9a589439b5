#include "launch/status_line.h"

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hoist::launch {
namespace {

// Writes each record's text and a newline to a FILE*, as spdlog's console sinks do.
class FileSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FileSink(std::FILE* f) : f_(f) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::fwrite(msg.payload.data(), 1, msg.payload.size(), f_);
    std::fputc('\n', f_);
  }
  void flush_() override { std::fflush(f_); }

 private:
  std::FILE* f_;
};

// What a terminal shows for `bytes`: '\r' returns to column 0, ESC[K erases to the end of the
// line, '\n' ends the line; other bytes overwrite at the cursor. The last line is kept even
// when it has no newline.
std::vector<std::string> Screen(const std::string& bytes) {
  std::vector<std::string> lines(1);
  std::size_t col = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::string& line = lines.back();
    if (bytes.compare(i, 3, "\033[K") == 0) {
      line.resize(col);
      i += 2;
    } else if (bytes[i] == '\r') {
      col = 0;
    } else if (bytes[i] == '\n') {
      lines.emplace_back();
      col = 0;
    } else {
      if (col < line.size()) {
        line[col] = bytes[i];
      } else {
        line.push_back(bytes[i]);
      }
      ++col;
    }
  }
  if (lines.back().empty()) lines.pop_back();
  return lines;
}

class StatusLineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f_ = open_memstream(&buf_, &size_);
    ASSERT_NE(f_, nullptr);
    line_ = std::make_shared<StatusLine>(f_);
    logger_ = std::make_shared<spdlog::logger>("status-line-test",
                                               WrapSink(std::make_shared<FileSink>(f_), line_));
  }
  void TearDown() override { std::free(buf_); }
  std::string Bytes() {
    std::fflush(f_);
    std::string s(buf_, size_);
    return s;
  }
  void Close() { std::fclose(f_); }

  std::FILE* f_ = nullptr;
  char* buf_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<StatusLine> line_;
  std::shared_ptr<spdlog::logger> logger_;
};

TEST_F(StatusLineTest, RecordsGoAboveTheBarNeverIntoIt) {
  line_->Show("hoist: [#.....] 1 / 6 MiB, allocating the arena");
  logger_->warn("rank 0: a warning while the bar shows");
  line_->Show("hoist: [###...] 3 / 6 MiB");
  logger_->info("rank 0: another record");
  line_->Finish("hoist: [######] 6 / 6 MiB, done");
  logger_->info("after the bar");
  const std::vector<std::string> screen = Screen(Bytes());
  Close();
  const std::vector<std::string> want = {"rank 0: a warning while the bar shows",
                                         "rank 0: another record",
                                         "hoist: [######] 6 / 6 MiB, done", "after the bar"};
  EXPECT_EQ(screen, want);
}

TEST_F(StatusLineTest, AShorterBarLeavesNothingOfTheLongerOne) {
  line_->Show("hoist: a long line, allocating the arena");
  line_->Show("hoist: short");
  const std::vector<std::string> screen = Screen(Bytes());
  Close();
  EXPECT_EQ(screen, std::vector<std::string>{"hoist: short"});
}

TEST_F(StatusLineTest, WithoutABarRecordsAreWrittenAsTheyAre) {
  logger_->info("one");
  line_->Interrupt([&] { std::fputs("hoist: error: two\n", f_); });
  const std::string bytes = Bytes();
  Close();
  EXPECT_EQ(bytes, "one\nhoist: error: two\n");  // no clearing sequence when nothing is shown
}

TEST_F(StatusLineTest, EndLeavesTheBarAndWhatFollowsGoesBelowIt) {
  line_->Show("hoist: [##....] 2 / 6 MiB");
  line_->End();
  std::fputs("hoist: error: rank 1 failed\n", f_);
  line_->End();  // nothing shows: nothing written
  const std::string bytes = Bytes();
  Close();
  const std::vector<std::string> want = {"hoist: [##....] 2 / 6 MiB",
                                         "hoist: error: rank 1 failed"};
  EXPECT_EQ(Screen(bytes), want);
  EXPECT_EQ(bytes.back(), '\n');
}

}  // namespace
}  // namespace hoist::launch
