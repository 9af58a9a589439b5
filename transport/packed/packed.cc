#include "transport/packed/packed.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>

#include "codec/checksum.h"
#include "util/parallel.h"

namespace hoist::transport {
namespace {

// Values start + r * pitch + c (r < rows, c < width) of a tensor or stream, landing at arena
// dst + r * dst_pitch + c * value_bytes.
struct Region {
  std::uint64_t start = 0, pitch = 0, width = 0, rows = 0;
  std::uint64_t dst = 0, dst_pitch = 0;
};

std::string Label(const std::string& path, const std::string& tensor) {
  return path + ": tensor " + tensor;
}

Status PreadAll(const std::string& path, std::uint64_t offset, std::uint64_t n, std::byte* dst) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": open: " + std::strerror(errno));
  std::uint64_t done = 0;
  Status s;
  while (done < n && s.ok()) {
    const ssize_t got = ::pread(fd, dst + done, std::min<std::uint64_t>(n - done, 1ull << 30),
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      s = Status::IoError(path + ": read at offset " + std::to_string(offset + done) + ": " +
                          (got == 0 ? std::string("end of file") : std::strerror(errno)));
    }
    if (got > 0) done += static_cast<std::uint64_t>(got);
  }
  ::close(fd);
  return s;
}

// Checks one stream of tensor t against the tensor (its columns, size and value size).
Status CheckStream(const PackedStreams::Tensor& t, const PackedStreams::Stream& s,
                   std::uint64_t prev_end, const std::string& label) {
  const std::uint64_t rows = t.bytes / t.value_bytes / t.row_values;
  if (s.col_begin != prev_end || s.col_end <= s.col_begin || s.col_end > t.row_values) {
    return Status::Corrupt(label + ": stream at offset " + std::to_string(s.offset) +
                           " holds columns " + std::to_string(s.col_begin) + ".." +
                           std::to_string(s.col_end) + ", expected to start at " +
                           std::to_string(prev_end) + " within " + std::to_string(t.row_values));
  }
  const std::uint64_t want = rows * (s.col_end - s.col_begin) * t.value_bytes;
  const bool coded = s.info.method == codec::Method::kHuffman;
  const std::uint32_t size = codec::DTypeSize(s.info.dtype);
  if (s.info.original_bytes != want || (coded && size != t.value_bytes) ||
      t.value_bytes % size != 0) {
    return Status::Corrupt(label + ": stream at offset " + std::to_string(s.offset) + " decodes " +
                           std::to_string(s.info.original_bytes) + " bytes of " +
                           std::string(codec::DTypeName(s.info.dtype)) + ", expected " +
                           std::to_string(want) + " bytes of " + std::to_string(t.value_bytes) +
                           "-byte values");
  }
  return Status::Ok();
}

Result<PackedStreams::Tensor> ParseTensor(const proto::PackedTensor& pt, const std::string& path) {
  const std::string label = Label(path, pt.name());
  PackedStreams::Tensor t{pt.name(),       pt.file(),        pt.offset(), pt.bytes(),
                          pt.row_values(), pt.value_bytes(), pt.xxh64(),  {}};
  if (t.value_bytes == 0 || t.row_values == 0 || t.bytes % t.value_bytes != 0 ||
      t.bytes / t.value_bytes % t.row_values != 0 || pt.streams_size() == 0) {
    return Status::Corrupt(label + ": " + std::to_string(t.bytes) + " bytes of " +
                           std::to_string(t.value_bytes) + "-byte values are not rows of " +
                           std::to_string(t.row_values) + " values (or it has no stream)");
  }
  std::uint64_t end = 0;
  for (const proto::PackedStream& ps : pt.streams()) {
    PackedStreams::Stream s{ps.offset(), ps.bytes(), ps.col_begin(), ps.col_end(), {}};
    const std::string& h = ps.header();
    HOIST_ASSIGN_OR_RETURN(
        s.info, codec::ParseHeader(
                    std::span(reinterpret_cast<const std::uint8_t*>(h.data()), h.size()),
                    ps.bytes(), label + " (stream at offset " + std::to_string(ps.offset()) + ")"));
    HOIST_RETURN_IF_ERROR(CheckStream(t, s, end, label));
    const codec::StreamId id{pt.name_xxh64(), static_cast<std::uint32_t>(t.streams.size()),
                             static_cast<std::uint32_t>(pt.streams_size()), s.col_begin};
    if (s.info.id != id) {
      return Status::Corrupt(label + ": stream at offset " + std::to_string(s.offset) +
                             " is stream " + std::to_string(s.info.id.index) + " of another " +
                             "tensor or place (its header's identity does not match)");
    }
    end = s.col_end;
    t.streams.push_back(std::move(s));
  }
  if (end != t.row_values) {
    return Status::Corrupt(label + ": streams cover columns 0.." + std::to_string(end) + " of " +
                           std::to_string(t.row_values));
  }
  return t;
}

// Tensor t read from its shard and decoded on the host into *out (stripes reassembled); each
// stream's decode checks its checksums.
Status DecodeTensor(const PackedStreams::Tensor& t, const std::string& path,
                    std::vector<std::byte>* out) {
  out->assign(t.bytes, std::byte{0});
  const std::uint64_t rows = t.bytes / t.value_bytes / t.row_values;
  const std::uint64_t row = t.row_values * t.value_bytes;
  std::vector<std::uint8_t> stream, part;
  for (const PackedStreams::Stream& s : t.streams) {
    stream.resize(s.bytes);
    HOIST_RETURN_IF_ERROR(
        PreadAll(path, s.offset, s.bytes, reinterpret_cast<std::byte*>(stream.data())));
    const std::uint64_t w = (s.col_end - s.col_begin) * t.value_bytes;
    if (w == row && s.info.original_bytes == t.bytes) {  // the whole tensor: decode in place
      HOIST_RETURN_IF_ERROR(
          codec::Decode(stream, {reinterpret_cast<std::uint8_t*>(out->data()), out->size()},
                        Label(path, t.name)));
      continue;
    }
    part.resize(s.info.original_bytes);
    HOIST_RETURN_IF_ERROR(codec::Decode(stream, part, Label(path, t.name)));
    for (std::uint64_t r = 0; r < rows; ++r) {
      std::memcpy(out->data() + r * row + s.col_begin * t.value_bytes, part.data() + r * w, w);
    }
  }
  const std::uint64_t got = codec::Xxh64(out->data(), out->size());
  if (got != t.xxh64) {
    char buf[80];
    std::snprintf(buf, sizeof buf, "XXH64 %016llx, the index recorded %016llx",
                  static_cast<unsigned long long>(got), static_cast<unsigned long long>(t.xxh64));
    return Status::Corrupt(Label(path, t.name) + ": the decoded tensor (" +
                           std::to_string(t.bytes) + " bytes at logical offset " +
                           std::to_string(t.offset) + ") has " + buf + " for the original bytes");
  }
  return Status::Ok();
}

// Turns logical copies into a PackedWork (see packed.h).
class Translator {
 public:
  Translator(const PackedStreams& p, const std::vector<std::string>& paths,
             const std::vector<bool>& packed, const std::vector<std::size_t>& first,
             const std::vector<std::size_t>& stream_first, std::size_t streams, PackedWork* w)
      : p_(p),
        paths_(paths),
        packed_(packed),
        first_(first),
        stream_first_(stream_first),
        w_(*w),
        index_(streams, kNoStream) {}

  Status Add(int i, const proto::Copy& c) {
    if (c.width() == 0 || c.rows() == 0) return Status::Ok();
    if (c.file() >= packed_.size() || !packed_[c.file()]) {
      *w_.plan.add_copies() = c;  // a plain file
      return Status::Ok();
    }
    proto::Copy n = c;
    if (n.rows() > 1 && n.src_pitch() == n.width() && n.dst_pitch() == n.width()) {
      n.set_width(n.width() * n.rows());
      n.set_rows(1);
    }
    return n.rows() == 1 ? AddRange(i, n) : AddRect(i, n);
  }

 private:
  Status Bad(int i, const proto::Copy& c, const std::string& what) const {
    return Status::Corrupt("copy " + std::to_string(i) + " of " + paths_[c.file()] +
                           " (logical offset " + std::to_string(c.src_offset()) + "): " + what);
  }

  // The tensor of file f holding logical byte a, or -1.
  std::int64_t Find(std::uint32_t f, std::uint64_t a) const {
    const auto& ts = p_.tensors();
    auto lo = ts.begin() + static_cast<std::ptrdiff_t>(first_[f]);
    auto hi = ts.begin() + static_cast<std::ptrdiff_t>(first_[f + 1]);
    auto it = std::upper_bound(
        lo, hi, a, [](std::uint64_t x, const PackedStreams::Tensor& t) { return x < t.offset; });
    if (it == lo) return -1;
    --it;
    if (a - it->offset >= it->bytes) return -1;
    return it - ts.begin();
  }

  Status AddRange(int i, const proto::Copy& c) {
    std::uint64_t a = c.src_offset(), n = c.width(), dst = c.dst_offset();
    while (n > 0) {
      const std::int64_t ti = Find(c.file(), a);
      if (ti < 0) return Bad(i, c, "byte " + std::to_string(a) + " is in no tensor");
      const PackedStreams::Tensor& t = p_.tensors()[ti];
      const std::uint64_t rel = a - t.offset, m = std::min(n, t.bytes - rel);
      if (rel % t.value_bytes != 0 || m % t.value_bytes != 0) {
        return Bad(i, c, "cuts a value of tensor " + t.name);
      }
      const std::uint64_t v = m / t.value_bytes;
      HOIST_RETURN_IF_ERROR(Tensor(i, c, ti, Region{rel / t.value_bytes, v, v, 1, dst, 0}));
      a += m;
      dst += m;
      n -= m;
    }
    return Status::Ok();
  }

  // A strided copy, split where its rows pass from one tensor to the next: the plan coalesces
  // copies of the same width and pitch across adjacent tensors (a sliced weight and the scale or
  // bias stored right after it), which are contiguous in the original file but not in the codec's
  // streams. A row that itself crosses a tensor's end is refused.
  Status AddRect(int i, const proto::Copy& c) {
    std::uint64_t src = c.src_offset(), dst = c.dst_offset(), rows = c.rows();
    while (rows > 0) {
      const std::int64_t ti = Find(c.file(), src);
      if (ti < 0) return Bad(i, c, "byte " + std::to_string(src) + " is in no tensor");
      const PackedStreams::Tensor& t = p_.tensors()[ti];
      const std::uint64_t rel = src - t.offset;
      const std::uint32_t vb = t.value_bytes;
      if (c.width() > t.bytes - rel) return Bad(i, c, "a row crosses the end of tensor " + t.name);
      if (rel % vb != 0 || c.src_pitch() % vb != 0 || c.width() % vb != 0) {
        return Bad(i, c, "cuts values of tensor " + t.name);
      }
      const std::uint64_t fit = (t.bytes - rel - c.width()) / c.src_pitch() + 1;
      const std::uint64_t n = std::min(fit, rows);
      HOIST_RETURN_IF_ERROR(Tensor(
          i, c, ti, Region{rel / vb, c.src_pitch() / vb, c.width() / vb, n, dst, c.dst_pitch()}));
      src += n * c.src_pitch();
      dst += n * c.dst_pitch();
      rows -= n;
    }
    return Status::Ok();
  }

  // A region of tensor ti: per stream, the part of it that stream holds.
  Status Tensor(int i, const proto::Copy& c, std::int64_t ti, Region r) {
    const PackedStreams::Tensor& t = p_.tensors()[ti];
    if (t.streams.size() == 1) return Stream(ti, 0, r);
    const std::uint64_t R = t.row_values, c0 = r.start % R, r0 = r.start / R;
    if (r.rows == 1 && c0 + r.width > R) {  // whole rows, contiguous
      if (c0 != 0 || r.width % R != 0) return Bad(i, c, "cuts rows of striped tensor " + t.name);
      r.rows = r.width / R;
      r.width = r.pitch = R;
      r.dst_pitch = R * t.value_bytes;
    } else if (r.rows == 1) {
      r.pitch = R;
    }
    if (r.pitch % R != 0 || c0 + r.width > R) {
      return Bad(i, c, "is not a column range of striped tensor " + t.name);
    }
    for (std::size_t s = 0; s < t.streams.size(); ++s) {
      const PackedStreams::Stream& st = t.streams[s];
      const std::uint64_t lo = std::max(c0, st.col_begin);
      const std::uint64_t hi = std::min(c0 + r.width, st.col_end);
      if (lo >= hi) continue;
      const std::uint64_t sw = st.col_end - st.col_begin;
      HOIST_RETURN_IF_ERROR(Stream(ti, s,
                                   Region{r0 * sw + (lo - st.col_begin), r.pitch / R * sw, hi - lo,
                                          r.rows, r.dst + (lo - c0) * t.value_bytes, r.dst_pitch}));
    }
    return Status::Ok();
  }

  // The part r of stream s of tensor ti: a unit of the blocks it touches, each a job that checks
  // its block (stored streams too).
  Status Stream(std::int64_t ti, std::size_t s, Region r) {
    const PackedStreams::Tensor& t = p_.tensors()[ti];
    const PackedStreams::Stream& st = t.streams[s];
    const codec::StreamInfo& info = st.info;
    const std::uint64_t payload = st.offset + info.header_bytes;
    // A stored stream of plain bytes (a dtype the codec does not know) counts bytes: the
    // region, in the tensor's values, in the stream's.
    const std::uint64_t per = t.value_bytes / codec::DTypeSize(info.dtype);
    r.start *= per;
    r.pitch *= per;
    r.width *= per;
    const std::uint64_t V = info.block_values;
    const std::uint64_t last = r.start + (r.rows - 1) * r.pitch + r.width - 1;
    const auto b0 = static_cast<std::uint32_t>(r.start / V);
    const auto b1 = static_cast<std::uint32_t>(last / V);
    DecodeUnit u;
    u.file = t.file;
    u.src = payload + info.block_offsets[b0];
    u.bytes = info.block_offsets[b1 + 1] - info.block_offsets[b0];
    u.job_begin = w_.decode.jobs.size();
    const std::uint32_t index = StreamIndex(ti, s);
    for (std::uint32_t b = b0; b <= b1; ++b) {
      DecodeJob j;
      j.src = info.block_offsets[b] - info.block_offsets[b0];
      j.bytes = static_cast<std::uint32_t>(info.block_offsets[b + 1] - info.block_offsets[b]);
      j.values = static_cast<std::uint32_t>(info.block_value_count(b));
      j.first =
          static_cast<std::int64_t>(std::uint64_t{b} * V) - static_cast<std::int64_t>(r.start);
      j.pitch = r.pitch;
      j.width = r.width;
      j.rows = r.rows;
      j.dst = r.dst;
      j.dst_pitch = r.dst_pitch;
      j.stream = index;
      j.block = b;
      j.checksum = info.block_checksums[b];
      w_.decode.max_block_bytes = std::max<std::uint64_t>(w_.decode.max_block_bytes, j.bytes);
      w_.decode.jobs.push_back(j);
    }
    u.job_end = w_.decode.jobs.size();
    w_.units.push_back(u);
    return Status::Ok();
  }

  // Stream s of tensor ti's index in w_.decode.streams, added on first use.
  std::uint32_t StreamIndex(std::int64_t ti, std::size_t s) {
    std::uint32_t& index = index_[stream_first_[static_cast<std::size_t>(ti)] + s];
    if (index == kNoStream) {
      const PackedStreams::Tensor& t = p_.tensors()[ti];
      const codec::StreamInfo& info = t.streams[s].info;
      index = w_.decode.AddStream(info, Label(paths_[t.file], t.name) + " (stream at offset " +
                                            std::to_string(t.streams[s].offset) + ")");
    }
    return index;
  }

  static constexpr std::uint32_t kNoStream = ~std::uint32_t{0};

  const PackedStreams& p_;
  const std::vector<std::string>& paths_;
  const std::vector<bool>& packed_;
  const std::vector<std::size_t>& first_;
  const std::vector<std::size_t>& stream_first_;
  PackedWork& w_;
  std::vector<std::uint32_t> index_;  // per stream of every tensor: kNoStream until added
};

}  // namespace

Result<PackedStreams> PackedStreams::FromPlan(const proto::LoadPlan& plan) {
  PackedStreams p;
  if (plan.packed_size() == 0) return p;
  for (const proto::File& f : plan.files()) {
    p.paths_.push_back(f.path());
    p.packed_.push_back(f.packed());
  }
  // The headers parsed on a few threads (a DeepSeek-V3 rank's view holds thousands of tensors);
  // the error is the first tensor's in plan order, as one thread would return.
  p.tensors_.resize(static_cast<std::size_t>(plan.packed_size()));
  const int threads = util::ThreadsFor(p.tensors_.size(), /*per_thread=*/128, /*most=*/16);
  HOIST_RETURN_IF_ERROR(util::ParallelTry(p.tensors_.size(), threads, [&](std::uint64_t i) {
    const proto::PackedTensor& pt = plan.packed(static_cast<int>(i));
    if (pt.file() >= p.paths_.size() || !p.packed_[pt.file()]) {
      return Status::Corrupt("packed tensor " + pt.name() + " names file " +
                             std::to_string(pt.file()) + ", not a packed file of the plan");
    }
    HOIST_ASSIGN_OR_RETURN(p.tensors_[i], ParseTensor(pt, p.paths_[pt.file()]));
    return Status::Ok();
  }));
  std::sort(p.tensors_.begin(), p.tensors_.end(), [](const Tensor& a, const Tensor& b) {
    return a.file != b.file ? a.file < b.file : a.offset < b.offset;
  });
  p.stream_first_.reserve(p.tensors_.size());
  for (const Tensor& t : p.tensors_) {
    p.stream_first_.push_back(p.streams_);
    p.streams_ += t.streams.size();
    for (const Stream& s : t.streams) p.blocks_ += s.info.block_count;
  }
  p.file_first_.assign(p.paths_.size() + 1, 0);
  for (const Tensor& t : p.tensors_) ++p.file_first_[t.file + 1];
  for (std::size_t f = 0; f < p.paths_.size(); ++f) p.file_first_[f + 1] += p.file_first_[f];
  for (std::size_t i = 1; i < p.tensors_.size(); ++i) {
    const Tensor &a = p.tensors_[i - 1], &b = p.tensors_[i];
    if (a.file == b.file && a.offset + a.bytes > b.offset) {
      return Status::Corrupt(Label(p.paths_[b.file], b.name) + ": logical bytes overlap " + a.name +
                             "'s");
    }
  }
  return p;
}

Result<PackedWork> PackedStreams::Translate(const proto::RankPlan& logical) const {
  PackedWork w;
  w.plan = logical;
  w.plan.clear_copies();
  // Reserved for every block of every tensor (a rank touches at most that; untouched pages
  // cost nothing): no job or stream is copied as the vectors grow.
  w.decode.jobs.reserve(blocks_);
  w.decode.streams.reserve(streams_);
  w.decode.code_lengths.reserve(streams_);
  Translator tr(*this, paths_, packed_, file_first_, stream_first_, streams_, &w);
  for (int i = 0; i < logical.copies_size(); ++i) {
    HOIST_RETURN_IF_ERROR(tr.Add(i, logical.copies(i)));
    w.copies_end.push_back(static_cast<std::size_t>(w.plan.copies_size()));
    w.units_end.push_back(w.units.size());
  }
  return w;
}

Status PackedStreams::ReadLogical(std::uint32_t file, std::uint64_t offset, std::uint64_t bytes,
                                  std::byte* dst) const {
  std::lock_guard lock(cache_->mu);
  while (bytes > 0) {
    std::size_t ti = ~std::size_t{0};
    if (file < paths_.size()) {
      for (std::size_t i = file_first_[file]; i < file_first_[file + 1]; ++i) {
        if (offset >= tensors_[i].offset && offset - tensors_[i].offset < tensors_[i].bytes) ti = i;
      }
    }
    if (ti == ~std::size_t{0}) {
      return Status::Corrupt("packed file " + std::to_string(file) + ": logical byte " +
                             std::to_string(offset) + " is in no tensor");
    }
    if (cache_->tensor != ti) {
      cache_->tensor = ~std::size_t{0};
      HOIST_RETURN_IF_ERROR(DecodeTensor(tensors_[ti], paths_[tensors_[ti].file], &cache_->bytes));
      cache_->tensor = ti;
    }
    const Tensor& t = tensors_[ti];
    const std::uint64_t rel = offset - t.offset, m = std::min(bytes, t.bytes - rel);
    std::memcpy(dst, cache_->bytes.data() + rel, m);
    dst += m;
    offset += m;
    bytes -= m;
  }
  return Status::Ok();
}

}  // namespace hoist::transport
