// Test-only helpers for tests/transport and tests/rank: a scratch folder, deterministic non-zero
// file content, a plain-pread reference for plans, and a watchdog so that a hang fails the test
// instead of the CI job.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "proto/plan.pb.h"
#include "tests/scratch_dir.h"
#include "transport/devices/device.h"

namespace hoist::testtransport {

using ScratchDir = hoist::testing::ScratchDir;

// Byte i of the stream for `seed`: a splitmix64 hash mapped to 1..255 (never zero, so a byte
// that was never written, or a zero fill, cannot pass for content).
inline std::uint8_t PatternByte(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<std::uint8_t>(z % 255 + 1);
}

inline std::vector<std::uint8_t> Pattern(std::uint64_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = PatternByte(seed, i);
  return v;
}

inline void WriteFile(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot create " + path);
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fclose(f);
    throw std::runtime_error("short write to " + path);
  }
  std::fclose(f);
}

inline proto::File StatFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot stat " + path);
  proto::File f;
  f.set_path(path);
  f.set_size(static_cast<std::uint64_t>(st.st_size));
  f.set_mtime_ns(static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  f.set_data_start(0);
  return f;
}

// Whether /proc/self/maps lists a mapping of `path`.
inline bool Mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() >= path.size() &&
        line.compare(line.size() - path.size(), path.size(), path) == 0) {
      return true;
    }
  }
  return false;
}

// Reads the whole file once, which brings it into the page cache.
inline void Warm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 16);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
  }
}

// Drops the file's clean pages from the page cache (best effort); true if the kernel accepted.
inline bool Evict(const std::string& path, std::uint64_t offset, std::uint64_t len) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  ::fdatasync(fd);
  bool ok = ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(len),
                            POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

struct Expected {
  std::vector<std::uint8_t> bytes;
  std::vector<bool> covered;
};

// The obviously-correct reference: every copy row by row with pread, every fill with a loop.
inline Expected ReferenceArena(const proto::LoadPlan& plan, const proto::RankPlan& rp) {
  Expected e;
  e.bytes.assign(rp.arena_bytes(), 0);
  e.covered.assign(rp.arena_bytes(), false);
  for (const proto::Copy& c : rp.copies()) {
    int fd = ::open(plan.files(c.file()).path().c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error("reference: cannot open file");
    for (std::uint64_t r = 0; r < c.rows(); ++r) {
      std::vector<std::uint8_t> row(c.width());
      ssize_t got = ::pread(fd, row.data(), row.size(),
                            static_cast<off_t>(c.src_offset() + r * c.src_pitch()));
      if (got != static_cast<ssize_t>(row.size())) {
        ::close(fd);
        throw std::runtime_error("reference: short pread");
      }
      for (std::uint64_t b = 0; b < c.width(); ++b) {
        e.bytes[c.dst_offset() + r * c.dst_pitch() + b] = row[b];
        e.covered[c.dst_offset() + r * c.dst_pitch() + b] = true;
      }
    }
    ::close(fd);
  }
  for (const proto::Fill& f : rp.fills()) {
    for (std::uint64_t b = 0; b < f.bytes(); ++b) {
      e.bytes[f.dst_offset() + b] = static_cast<std::uint8_t>(f.value());
      e.covered[f.dst_offset() + b] = true;
    }
  }
  return e;
}

// Index of the first covered byte where `got` differs from the reference, or -1.
inline std::int64_t FirstMismatch(const Expected& e, const std::uint8_t* got) {
  for (std::size_t i = 0; i < e.bytes.size(); ++i) {
    if (e.covered[i] && got[i] != e.bytes[i]) return static_cast<std::int64_t>(i);
  }
  return -1;
}

// Runs f on another thread; if it has not returned within `limit`, the process reports the hang
// and exits (a hung pipeline cannot be cancelled, and must not stall the whole suite).
template <typename F>
auto WithWatchdog(F f, std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto fut = std::async(std::launch::async, std::move(f));
  if (fut.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr, "WATCHDOG: call did not return within %lld s: the pipeline hangs\n",
                 static_cast<long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  return fut.get();
}

// A device (the host backend, say) whose decoder takes `delay` to make (as the CUDA decoder's
// upload does), so that a load's first copies are enqueued before any decode can be. A test may
// also hold every making until a gate opens, or make it fail.
class SlowDecoderDevice final : public transport::Device {
 public:
  SlowDecoderDevice(std::unique_ptr<transport::Device> inner, std::chrono::milliseconds delay)
      : in_(std::move(inner)), delay_(delay) {}
  // Set before any making starts.
  void HoldMakingUntil(std::shared_future<void> gate) { gate_ = std::move(gate); }
  void FailMaking(Status s) { fail_ = std::move(s); }

  std::string Name() const override { return in_->Name(); }
  const transport::DeviceCaps& Caps() const override { return in_->Caps(); }
  Result<transport::DeviceBuffer> Allocate(std::uint64_t b) override { return in_->Allocate(b); }
  Status Free(transport::DeviceBuffer& b) override { return in_->Free(b); }
  Result<transport::HostBuffer> AllocateStaging(std::uint64_t b,
                                                transport::StagingKind k) override {
    return in_->AllocateStaging(b, k);
  }
  Status FreeStaging(transport::HostBuffer& b) override { return in_->FreeStaging(b); }
  Status RegisterHost(const void* p, std::uint64_t b, bool ro) override {
    return in_->RegisterHost(p, b, ro);
  }
  Status UnregisterHost(const void* p) override { return in_->UnregisterHost(p); }
  Result<transport::StreamId> CreateStream() override { return in_->CreateStream(); }
  Result<transport::EventId> CreateEvent(bool timing) override { return in_->CreateEvent(timing); }
  Status DestroyStream(transport::StreamId s) override { return in_->DestroyStream(s); }
  Status DestroyEvent(transport::EventId e) override { return in_->DestroyEvent(e); }
  Status CopyAsync(const transport::Copy2D& op, transport::StreamId s) override {
    return in_->CopyAsync(op, s);
  }
  Status MemsetAsync(void* d, std::uint8_t v, std::uint64_t b, transport::StreamId s) override {
    return in_->MemsetAsync(d, v, b, s);
  }
  Status Record(transport::EventId e, transport::StreamId s) override { return in_->Record(e, s); }
  Status Wait(transport::EventId e) override { return in_->Wait(e); }
  Result<bool> Query(transport::EventId e) override { return in_->Query(e); }
  Result<double> Elapsed(transport::EventId a, transport::EventId b) override {
    return in_->Elapsed(a, b);
  }
  Status Synchronize(transport::StreamId s) override { return in_->Synchronize(s); }
  Status CopySync(const transport::Copy2D& op) override { return in_->CopySync(op); }
  Status CopyToHost(void* d, const void* s, std::uint64_t b) override {
    return in_->CopyToHost(d, s, b);
  }
  Status StreamWait(transport::StreamId s, transport::EventId e) override {
    return in_->StreamWait(s, e);
  }
  // The delay and the wait for the gate are the making's one step, "making delayed".
  Result<transport::DecoderId> CreateDecoder(const transport::DecodeSet& set) override {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(delay_);
    if (gate_.valid()) gate_.wait();
    const auto end = std::chrono::steady_clock::now();
    if (!fail_.ok()) return fail_;
    Result<transport::DecoderId> d = in_->CreateDecoder(set);
    if (d.ok()) {
      std::lock_guard lock(mu_);
      steps_[*d] = {{"making delayed", start, end}};
    }
    return d;
  }
  std::vector<DecoderStep> DecoderSteps(transport::DecoderId d) override {
    std::lock_guard lock(mu_);
    auto it = steps_.find(d);
    return it == steps_.end() ? std::vector<DecoderStep>{} : it->second;
  }
  Status DecodeAsync(transport::DecoderId d, std::size_t first, std::size_t count, const void* src,
                     void* arena_base, transport::StreamId s) override {
    return in_->DecodeAsync(d, first, count, src, arena_base, s);
  }
  Status DecoderStatus(transport::DecoderId d) override { return in_->DecoderStatus(d); }
  Status DestroyDecoder(transport::DecoderId d) override {
    {
      std::lock_guard lock(mu_);
      steps_.erase(d);
    }
    return in_->DestroyDecoder(d);
  }

 private:
  std::unique_ptr<transport::Device> in_;
  std::chrono::milliseconds delay_;
  std::shared_future<void> gate_;
  Status fail_ = Status::Ok();
  std::mutex mu_;
  std::map<transport::DecoderId, std::vector<DecoderStep>> steps_;
};

}  // namespace hoist::testtransport
