#include "rank/verify.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "transport/devices/transpose.h"

namespace hoist::rank {
namespace {

constexpr std::uint64_t kWindow = 64ull << 20;

std::string Hex(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

Status PreadAll(int fd, const std::string& path, std::uint64_t offset, std::byte* dst,
                std::uint64_t n) {
  std::uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd, dst + done, std::min<std::uint64_t>(n - done, 1ull << 30),
                          static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return Status::IoError("verify: " + path + ": read at offset " +
                             std::to_string(offset + done) + ": " + std::strerror(errno));
    }
    if (got == 0) {
      return Status::IoError("verify: " + path + ": unexpected end of file at offset " +
                             std::to_string(offset + done));
    }
    done += static_cast<std::uint64_t>(got);
  }
  return Status::Ok();
}

struct Item {
  std::uint64_t start;  // arena
  std::uint64_t end;
  int copy;  // -1: fill
  int fill;
};

// The checkpoint's bytes as the plan addresses them: plain files by pread, packed files (logical
// bytes) decoded on the host from their codec streams (transport/packed/packed.h), each stream
// checked against the XXH64 of its original bytes recorded when it was packed.
class FileCache {
 public:
  explicit FileCache(const transport::PackedStreams& packed) : packed_(packed) {}
  ~FileCache() {
    for (auto& [f, fd] : fds_) ::close(fd);
  }
  Status Read(std::uint32_t file, const std::string& path, std::uint64_t offset, std::byte* dst,
              std::uint64_t n) {
    if (!packed_.empty() && packed_.IsPacked(file))
      return packed_.ReadLogical(file, offset, n, dst);
    HOIST_ASSIGN_OR_RETURN(int fd, Get(file, path));
    return PreadAll(fd, path, offset, dst, n);
  }

 private:
  Result<int> Get(std::uint32_t file, const std::string& path) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IoError("verify: open " + path + ": " + std::strerror(errno));
    fds_[file] = fd;
    return fd;
  }

  const transport::PackedStreams& packed_;
  std::map<std::uint32_t, int> fds_;
};

// The copies and fills of `rp` in arena order (a copy spans its first to its last row), each
// checked to lie inside the arena of `arena_bytes`.
Result<std::vector<Item>> ArenaItems(const proto::RankPlan& rp, std::uint64_t arena_bytes) {
  std::vector<Item> items;
  for (int i = 0; i < rp.copies_size(); ++i) {
    const proto::Copy& c = rp.copies(i);
    if (c.width() == 0 || c.rows() == 0) continue;
    std::uint64_t extent = (c.rows() - 1) * c.dst_pitch() + c.width();
    items.push_back(Item{c.dst_offset(), c.dst_offset() + extent, i, -1});
  }
  for (int i = 0; i < rp.fills_size(); ++i) {
    const proto::Fill& f = rp.fills(i);
    if (f.bytes() == 0) continue;
    items.push_back(Item{f.dst_offset(), f.dst_offset() + f.bytes(), -1, i});
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.start < b.start; });
  for (const Item& it : items) {
    if (it.end > arena_bytes || it.end < it.start) {
      return Status::Corrupt("verify: " + std::string(it.copy >= 0 ? "copy " : "fill ") +
                             std::to_string(it.copy >= 0 ? it.copy : it.fill) +
                             " reaches outside the arena");
    }
  }
  return items;
}

// Arena bytes copied to the host: `bytes` holds the arena from offset `start` on.
struct Window {
  const std::byte* bytes;
  std::uint64_t start;
};

// Fill `fill` of `rp` holds its value in every byte.
Status CheckFill(const Window& w, const proto::RankPlan& rp, int fill) {
  const proto::Fill& f = rp.fills(fill);
  const auto want = static_cast<unsigned char>(f.value());
  for (std::uint64_t b = 0; b < f.bytes(); ++b) {
    const auto got = static_cast<unsigned char>(w.bytes[f.dst_offset() - w.start + b]);
    if (got != want) {
      return Status::Corrupt("verify: " + DescribeArenaOffset(rp, f.dst_offset() + b) +
                             " (arena offset " + std::to_string(f.dst_offset() + b) +
                             "): device has " + Hex(got) + ", expected fill value " + Hex(want) +
                             " (fill " + std::to_string(fill) + ")");
    }
  }
  return Status::Ok();
}

// Copy `copy` of `rp`: every row in the arena equals its bytes in the checkpoint file (read
// whole into *src when its extent fits the window, else row by row).
Status CheckCopy(const Window& w, const proto::LoadPlan& plan, const proto::RankPlan& rp, int copy,
                 FileCache* files, std::vector<std::byte>* src) {
  const proto::Copy& c = rp.copies(copy);
  if (c.file() >= static_cast<std::uint32_t>(plan.files_size())) {
    return Status::Corrupt("verify: copy " + std::to_string(copy) + " names file " +
                           std::to_string(c.file()) + " outside the plan");
  }
  const std::string& path = plan.files(c.file()).path();
  const std::uint64_t sext = (c.rows() - 1) * c.src_pitch() + c.width();
  const bool whole = sext <= kWindow;
  src->resize(whole ? sext : c.width());
  if (whole) HOIST_RETURN_IF_ERROR(files->Read(c.file(), path, c.src_offset(), src->data(), sext));
  for (std::uint64_t r = 0; r < c.rows(); ++r) {
    const std::byte* want = src->data();
    if (whole) {
      want += r * c.src_pitch();
    } else {
      HOIST_RETURN_IF_ERROR(
          files->Read(c.file(), path, c.src_offset() + r * c.src_pitch(), src->data(), c.width()));
    }
    const std::uint64_t dst = c.dst_offset() + r * c.dst_pitch();
    const std::byte* got = w.bytes + (dst - w.start);
    if (std::memcmp(got, want, c.width()) == 0) continue;
    std::uint64_t b = 0;
    while (got[b] == want[b]) ++b;
    return Status::Corrupt("verify: " + DescribeArenaOffset(rp, dst + b) + " (arena offset " +
                           std::to_string(dst + b) + "): device has " +
                           Hex(static_cast<unsigned char>(got[b])) + ", expected " +
                           Hex(static_cast<unsigned char>(want[b])) + " from " + path + " offset " +
                           std::to_string(c.src_offset() + r * c.src_pitch() + b) + " (copy " +
                           std::to_string(copy) + ", row " + std::to_string(r) + ")");
  }
  return Status::Ok();
}

// A transposed tensor's element size: its bytes over its elements, refused (Corrupt) when they
// do not divide or the tensor lies outside the arena.
Result<std::uint32_t> TransposedElementBytes(const proto::TensorOut& t, std::uint64_t arena_bytes) {
  const proto::Transpose& x = t.transpose();
  const std::uint64_t elems = x.batch() * x.rows() * x.cols();
  const std::uint64_t es = elems > 0 ? t.bytes() / elems : 0;
  if (elems == 0 || es * elems != t.bytes() || es > 8 || t.arena_offset() > arena_bytes ||
      t.bytes() > arena_bytes - t.arena_offset()) {
    return Status::Corrupt("plan: tensor " + t.name() + ": its transpose (" +
                           std::to_string(x.batch()) + " x " + std::to_string(x.rows()) + " x " +
                           std::to_string(x.cols()) + ") does not fit its " +
                           std::to_string(t.bytes()) + " bytes in the arena");
  }
  return static_cast<std::uint32_t>(es);
}

// A window that reaches into a transposed tensor holds all of it (undone on the host as a whole),
// with every item that starts inside: wend and j grow until nothing more joins.
void WidenForTransposed(const std::vector<const proto::TensorOut*>& transposed,
                        const std::vector<Item>& items, std::uint64_t wstart, std::uint64_t* wend,
                        std::size_t* j) {
  for (bool grew = true; grew;) {
    grew = false;
    for (const proto::TensorOut* t : transposed) {
      const std::uint64_t end = t->arena_offset() + t->bytes();
      if (t->arena_offset() < *wend && end > *wend && end > wstart) {
        *wend = end;
        grew = true;
      }
    }
    while (*j < items.size() && items[*j].start < *wend) {
      *wend = std::max(*wend, items[*j].end);
      ++*j;
      grew = true;
    }
  }
}

// The transposed tensors inside window [wstart, wend) put back as their copies landed them
// (each matrix's cols x rows turned into rows x cols), so the copies can be checked.
Status UntransposeWindow(const std::vector<const proto::TensorOut*>& transposed, std::byte* window,
                         std::uint64_t wstart, std::uint64_t wend) {
  std::vector<std::byte> tmp;
  for (const proto::TensorOut* tp : transposed) {
    const proto::TensorOut& t = *tp;
    if (t.arena_offset() < wstart || t.arena_offset() + t.bytes() > wend) {
      continue;
    }
    HOIST_ASSIGN_OR_RETURN(const std::uint32_t es, TransposedElementBytes(t, wend));
    const proto::Transpose& x = t.transpose();
    const std::uint64_t matrix = x.rows() * x.cols() * es;
    tmp.resize(matrix);
    for (std::uint64_t b = 0; b < x.batch(); ++b) {
      std::byte* m = window + (t.arena_offset() - wstart) + b * matrix;
      transport::TransposeMatrix(m, tmp.data(), x.cols(), x.rows(), es);
      std::memcpy(m, tmp.data(), matrix);
    }
  }
  return Status::Ok();
}

}  // namespace

std::string DescribeArenaOffset(const proto::RankPlan& rp, std::uint64_t off) {
  for (const proto::TensorOut& t : rp.tensors()) {
    if (off >= t.arena_offset() && off - t.arena_offset() < t.bytes()) {
      return "tensor " + t.name() + " byte " + std::to_string(off - t.arena_offset());
    }
  }
  return "arena offset " + std::to_string(off) + " (no tensor)";
}

Status TransposeArenaTensors(transport::Device& device, const transport::DeviceBuffer& arena,
                             const proto::RankPlan& rp, std::uint64_t* bytes) {
  for (const proto::TensorOut& t : rp.tensors()) {
    if (!t.has_transpose()) continue;
    HOIST_ASSIGN_OR_RETURN(const std::uint32_t es, TransposedElementBytes(t, arena.bytes));
    transport::Transpose op;
    op.base = static_cast<std::byte*>(arena.ptr) + t.arena_offset();
    op.batch = t.transpose().batch();
    op.rows = t.transpose().rows();
    op.cols = t.transpose().cols();
    op.elem_bytes = es;
    if (Status s = device.TransposeInPlace(op); !s.ok()) {
      return Status(s.code(), "tensor " + t.name() + ": " + s.message());
    }
    if (bytes != nullptr) *bytes += t.bytes();
  }
  return Status::Ok();
}

Status VerifyArena(transport::Device& device, const transport::DeviceBuffer& arena,
                   const proto::LoadPlan& plan, const proto::RankPlan& rp) {
  HOIST_ASSIGN_OR_RETURN(const std::vector<Item> items, ArenaItems(rp, arena.bytes));
  HOIST_ASSIGN_OR_RETURN(const transport::PackedStreams packed,
                         transport::PackedStreams::FromPlan(plan));
  FileCache files(packed);
  std::vector<const proto::TensorOut*> transposed;  // usually none
  for (const proto::TensorOut& t : rp.tensors()) {
    if (t.has_transpose()) transposed.push_back(&t);
  }
  std::vector<std::byte> window, src;
  const auto* base = static_cast<const std::byte*>(arena.ptr);
  std::size_t i = 0;
  while (i < items.size()) {
    const std::uint64_t wstart = items[i].start;
    std::uint64_t wend = items[i].end;
    std::size_t j = i + 1;
    while (j < items.size() && std::max(wend, items[j].end) - wstart <= kWindow) {
      wend = std::max(wend, items[j].end);
      ++j;
    }
    WidenForTransposed(transposed, items, wstart, &wend, &j);
    window.resize(wend - wstart);
    HOIST_RETURN_IF_ERROR(device.CopyToHost(window.data(), base + wstart, wend - wstart));
    HOIST_RETURN_IF_ERROR(UntransposeWindow(transposed, window.data(), wstart, wend));
    const Window w{window.data(), wstart};
    for (std::size_t k = i; k < j; ++k) {
      HOIST_RETURN_IF_ERROR(items[k].fill >= 0
                                ? CheckFill(w, rp, items[k].fill)
                                : CheckCopy(w, plan, rp, items[k].copy, &files, &src));
    }
    i = j;
  }
  return Status::Ok();
}

Result<std::string> DumpArena(transport::Device& device, const transport::DeviceBuffer& arena,
                              const proto::RankPlan& rp, const std::string& dir) {
  std::string header;
  try {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    std::set<std::string> names;
    std::uint64_t off = 0;
    for (const proto::TensorOut& t : rp.tensors()) {
      if (!names.insert(t.name()).second) {
        return Status::Corrupt("dump: tensor " + t.name() + " appears twice in the rank plan");
      }
      if (t.arena_offset() > arena.bytes || t.bytes() > arena.bytes - t.arena_offset()) {
        return Status::Corrupt("dump: tensor " + t.name() + " at arena offset " +
                               std::to_string(t.arena_offset()) + " (+" +
                               std::to_string(t.bytes()) + ") lies outside the arena");
      }
      nlohmann::ordered_json shape = nlohmann::ordered_json::array();
      for (std::uint64_t d : t.shape()) shape.push_back(d);
      h[t.name()] = {
          {"dtype", t.dtype()}, {"shape", shape}, {"data_offsets", {off, off + t.bytes()}}};
      off += t.bytes();
    }
    header = h.dump();
  } catch (const std::exception& e) {
    return Status::Corrupt(std::string("dump: header JSON: ") + e.what());
  }
  while (header.size() % 8 != 0) header.push_back(' ');

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("dump: create directory " + dir + ": " + ec.message());
  const std::string path = dir + "/rank-" + std::to_string(rp.rank()) + ".safetensors";
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IoError("dump: open " + tmp + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    std::fclose(f);
    std::remove(tmp.c_str());
    return Status::IoError("dump: " + tmp + ": " + what);
  };
  unsigned char len[8];
  std::uint64_t n = header.size();
  for (int b = 0; b < 8; ++b) len[b] = static_cast<unsigned char>(n >> (8 * b));
  if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(header.data(), 1, n, f) != n) {
    return fail(std::string("write header: ") + std::strerror(errno));
  }
  std::vector<std::byte> buf;
  const auto* base = static_cast<const std::byte*>(arena.ptr);
  for (const proto::TensorOut& t : rp.tensors()) {
    for (std::uint64_t done = 0; done < t.bytes();) {
      const std::uint64_t k = std::min(kWindow, t.bytes() - done);
      buf.resize(k);
      Status s = device.CopyToHost(buf.data(), base + t.arena_offset() + done, k);
      if (!s.ok()) {
        std::fclose(f);
        std::remove(tmp.c_str());
        return std::move(s).Annotate("dump: tensor " + t.name());
      }
      if (std::fwrite(buf.data(), 1, k, f) != k) {
        return fail("write tensor " + t.name() + ": " + std::strerror(errno));
      }
      done += k;
    }
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError("dump: close " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IoError("dump: rename " + tmp + " -> " + path + ": " + std::strerror(errno));
  }
  return path;
}

}  // namespace hoist::rank
