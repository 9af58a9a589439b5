// Prefaulter: it covers exactly the resident steps of its ranges, never touches a cold file,
// gives up on a file whose source refuses, and Stop ends it early with every byte accounted for.
// Sources are recording fakes (the real mapping's prefault is tested in source_test.cc).
#include "transport/prefault.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace hoist::transport {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;

class RecordingSource final : public Source {
 public:
  RecordingSource(bool resident, int fail_from_call = -1,
                  std::chrono::microseconds delay = std::chrono::microseconds(0))
      : resident_(resident), fail_from_(fail_from_call), delay_(delay) {}
  const std::string& path() const override { return path_; }
  std::uint64_t size() const override { return 1ull << 40; }
  std::string_view kind() const override { return "recording"; }
  Status ReadAt(std::uint64_t, void*, std::uint64_t) override {
    return Status::Internal("not read in these tests");
  }
  std::optional<std::uint64_t> ResidentNow(const RowsRead& b) const override {
    return resident_ ? b.width * b.rows : 0;
  }
  Status Prefault(std::uint64_t offset, std::uint64_t n) override {
    std::this_thread::sleep_for(delay_);
    std::lock_guard<std::mutex> lock(mu_);
    calls_.emplace_back(offset, n);
    if (fail_from_ >= 0 && static_cast<int>(calls_.size()) > fail_from_) {
      return Status::IoError("refused");
    }
    return Status::Ok();
  }
  std::vector<std::pair<std::uint64_t, std::uint64_t>> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    auto c = calls_;
    std::sort(c.begin(), c.end());
    return c;
  }

 private:
  std::string path_ = "recording";
  bool resident_;
  int fail_from_;
  std::chrono::microseconds delay_;
  std::mutex mu_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls_;
};

// The calls merged into disjoint [begin, end) intervals.
std::vector<std::pair<std::uint64_t, std::uint64_t>> Merged(
    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& calls) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (const auto& [off, n] : calls) {
    if (!out.empty() && out.back().second == off) {
      out.back().second = off + n;
    } else {
      out.emplace_back(off, off + n);
    }
  }
  return out;
}

TEST(PrefaulterTest, CoversEveryResidentRangeInStepsAndNeverTouchesAColdFile) {
  RecordingSource hot(true), cold(false);
  std::vector<FileSources> files(2);
  files[0].primary = &hot;
  files[1].primary = &cold;
  const std::vector<PrefaultRange> ranges = {
      {0, 100, 20 * kMiB + 5}, {1, 0, 9 * kMiB}, {0, 50 * kMiB, 3 * kMiB}};
  Prefaulter p(files, ranges, 3);
  const PrefaultReport r = p.Wait();

  const auto calls = hot.Calls();
  for (const auto& [off, n] : calls) EXPECT_LE(n, kPrefaultStepBytes) << off;
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> want = {{100, 100 + 20 * kMiB + 5},
                                                                     {50 * kMiB, 53 * kMiB}};
  EXPECT_EQ(Merged(calls), want);
  EXPECT_TRUE(cold.Calls().empty());
  EXPECT_EQ(r.bytes, 23 * kMiB + 5);
  EXPECT_EQ(r.skipped, 9 * kMiB);
  EXPECT_EQ(r.remaining, 0u);
  EXPECT_LE(r.start, r.end);
}

TEST(PrefaulterTest, AColdSourceIsAskedThroughTheColdSourceFirst) {
  // Auto mode: the cold (O_DIRECT) source answers residency without mapping; the mapping is
  // prefaulted only where that answer is "resident".
  RecordingSource mapping(true), says_cold(false), says_hot(true);
  std::vector<FileSources> files(2);
  files[0] = {&mapping, &says_cold, nullptr};
  RecordingSource mapping2(false);  // would say cold; the cold source's "resident" wins
  files[1] = {&mapping2, &says_hot, nullptr};
  Prefaulter p(files, {{0, 0, 4 * kMiB}, {1, 0, 4 * kMiB}}, 2);
  const PrefaultReport r = p.Wait();
  EXPECT_TRUE(mapping.Calls().empty());
  EXPECT_EQ(Merged(mapping2.Calls()),
            (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 4 * kMiB}}));
  EXPECT_EQ(r.bytes, 4 * kMiB);
  EXPECT_EQ(r.skipped, 4 * kMiB);
}

TEST(PrefaulterTest, ARefusingSourceEndsOnlyItsOwnFile) {
  RecordingSource refuses(true, /*fail_from_call=*/0), fine(true);
  std::vector<FileSources> files(2);
  files[0].primary = &refuses;
  files[1].primary = &fine;
  const int threads = 3;
  Prefaulter p(files, {{0, 0, 64 * kMiB}, {1, 0, 64 * kMiB}}, threads);
  const PrefaultReport r = p.Wait();
  EXPECT_GE(refuses.Calls().size(), 1u);
  EXPECT_LE(refuses.Calls().size(), static_cast<std::size_t>(threads));  // steps already taken
  EXPECT_EQ(Merged(fine.Calls()),
            (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0, 64 * kMiB}}));
  EXPECT_EQ(r.bytes, 64 * kMiB);
  EXPECT_EQ(r.skipped, 64 * kMiB);
  EXPECT_EQ(r.remaining, 0u);
}

TEST(PrefaulterTest, StopEndsItEarlyWithEveryByteAccountedFor) {
  RecordingSource slow(true, -1, std::chrono::milliseconds(2));
  std::vector<FileSources> files(1);
  files[0].primary = &slow;
  const std::uint64_t total = 1024 * kMiB;  // 128 steps of 2 ms on 2 threads: ~128 ms
  Prefaulter p(files, {{0, 0, total}}, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto a = std::chrono::steady_clock::now();
  const PrefaultReport r = p.Stop();
  const auto waited = std::chrono::steady_clock::now() - a;
  EXPECT_GT(r.remaining, 0u);
  EXPECT_EQ(r.bytes + r.skipped + r.remaining, total);
  EXPECT_EQ(r.bytes, slow.Calls().size() * kPrefaultStepBytes);
  EXPECT_LT(waited, std::chrono::milliseconds(100));  // one step per thread, not the rest
  const PrefaultReport again = p.Stop();              // idempotent
  EXPECT_EQ(again.bytes, r.bytes);
  EXPECT_EQ(again.remaining, r.remaining);
}

TEST(PrefaulterTest, NothingToDoStartsNoThreadAndReportsZero) {
  std::vector<FileSources> files(1);
  RecordingSource s(true);
  files[0].primary = &s;
  Prefaulter p(files, {}, 8);
  const PrefaultReport r = p.Stop();
  EXPECT_EQ(r.bytes + r.skipped + r.remaining, 0u);
  EXPECT_TRUE(s.Calls().empty());
}

}  // namespace
}  // namespace hoist::transport
