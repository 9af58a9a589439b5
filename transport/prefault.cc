#include "transport/prefault.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace hoist::transport {
namespace {

std::vector<PrefaultRange> Steps(const std::vector<PrefaultRange>& ranges) {
  std::vector<PrefaultRange> steps;
  for (const PrefaultRange& r : ranges) {
    for (std::uint64_t at = 0; at < r.bytes; at += kPrefaultStepBytes) {
      steps.push_back({r.file, r.offset + at, std::min(kPrefaultStepBytes, r.bytes - at)});
    }
  }
  return steps;
}

}  // namespace

Prefaulter::Prefaulter(const std::vector<FileSources>& files, std::vector<PrefaultRange> ranges,
                       int threads)
    : files_(files), steps_(Steps(ranges)), file_failed_(files.size()) {
  report_.start = std::chrono::steady_clock::now();
  const int n = static_cast<int>(std::min<std::size_t>(std::max(threads, 1), steps_.size()));
  for (int t = 0; t < n; ++t) threads_.emplace_back([this] { Work(); });
}

Prefaulter::~Prefaulter() { Stop(); }

PrefaultReport Prefaulter::Stop() {
  stop_.store(true);
  return Join();
}

PrefaultReport Prefaulter::Wait() { return Join(); }

PrefaultReport Prefaulter::Join() {
  if (stopped_) return report_;
  for (std::thread& t : threads_) t.join();
  stopped_ = true;
  report_.end = std::chrono::steady_clock::now();
  report_.bytes = done_bytes_.load();
  report_.skipped = skipped_bytes_.load();
  std::uint64_t all = 0;
  for (const PrefaultRange& s : steps_) all += s.bytes;
  report_.remaining = all - report_.bytes - report_.skipped;
  return report_;
}

bool Prefaulter::Resident(const FileSources& fs, std::uint64_t offset, std::uint64_t n) const {
  const RowsRead block{offset, n, n, 1, nullptr, n};
  std::optional<std::uint64_t> here = fs.cold ? fs.cold->ResidentNow(block) : std::nullopt;
  if (!here) here = fs.primary->ResidentNow(block);
  return here && *here * 2 >= n;
}

void Prefaulter::Work() {
  while (!stop_.load(std::memory_order_relaxed)) {
    const std::size_t i = next_.fetch_add(1);
    if (i >= steps_.size()) return;
    const PrefaultRange& s = steps_[i];
    if (s.file >= files_.size() || files_[s.file].primary == nullptr || file_failed_[s.file] ||
        !Resident(files_[s.file], s.offset, s.bytes)) {
      skipped_bytes_ += s.bytes;
      continue;
    }
    if (!files_[s.file].primary->Prefault(s.offset, s.bytes).ok()) {
      file_failed_[s.file] = true;
      skipped_bytes_ += s.bytes;
      continue;
    }
    done_bytes_ += s.bytes;
  }
}

}  // namespace hoist::transport
