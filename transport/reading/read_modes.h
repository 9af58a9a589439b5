// The read modes (`--read`, the `read` option): how a rank's bytes move from storage to the
// device, their one name table (the option's choices), and the sources each mode opens for a
// load's files (OpenSources). The staging pipeline (transport/staging/pipeline.h) runs them.
//
//   auto        per file, per chunk: page-cache bytes through a mapping made on first use, cold
//               ones through O_DIRECT (buffered where O_DIRECT is unsupported)
//   buffered    pread into the staging ring
//   direct      O_DIRECT with native AIO into the staging ring
//   mmap        memcpy from a mapping into the staging ring
//   pageable    no ring: copies straight from the mapping (for comparison)
//   registered  no ring: the mapping registered for DMA (for comparison)
//
// Ownership: a SourceSet owns the sources it opened; FileSources borrow them. Failure: the first
// open's error (naming the path). Threading: OpenSources is a plain function; the sources it
// opens are thread-safe (transport/reading/source.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "transport/reading/residency.h"
#include "transport/reading/source.h"
#include "util/enum_names.h"

namespace hoist::transport {

// How bytes move from storage to the device. kPageable and kRegistered bypass the staging ring
// (for comparison with the literature's two naive paths).
enum class ReadMode { kAuto, kBuffered, kDirect, kMmap, kPageable, kRegistered };
// The read modes' one name table (the `read` option's choices, in this order).
inline constexpr EnumName<ReadMode> kReadModeNames[] = {
    {ReadMode::kAuto, "auto"},         {ReadMode::kBuffered, "buffered"},
    {ReadMode::kDirect, "direct"},     {ReadMode::kMmap, "mmap"},
    {ReadMode::kPageable, "pageable"}, {ReadMode::kRegistered, "registered"},
};

constexpr std::optional<ReadMode> ParseReadMode(std::string_view name) {
  return EnumFromName(kReadModeNames, name);
}
constexpr std::string_view ReadModeName(ReadMode mode) { return NameOfEnum(kReadModeNames, mode); }
// Whether the mode moves bytes through the staging ring (all but kPageable and kRegistered).
constexpr bool Staged(ReadMode mode) {
  return mode != ReadMode::kPageable && mode != ReadMode::kRegistered;
}

// Per plan file (index = proto File index). Unused files may have null sources.
struct FileSources {
  // The mode's source: mmap for pageable/registered; for auto a mapping made on first use.
  Source* primary = nullptr;
  Source* cold = nullptr;  // auto only: for non-resident chunks (direct, or buffered fallback)
  // auto only: decides per chunk. Null: each chunk asks the page cache just before it is read
  // (Source::ResidentNow of the cold source, else of the primary).
  const Residency* residency = nullptr;
};

// The sources a mode needs for the files in `used` (others stay null). Auto opens mmap plus
// O_DIRECT, falling back to buffered for the cold path where O_DIRECT is unsupported (noted in
// *note). The SourceSet owns them.
struct SourceSet {
  std::vector<std::unique_ptr<Source>> owned;
  std::vector<FileSources> files;
  std::string note;
};
// `wrap`, when set, wraps every opened source (tests inject faults this way).
using SourceWrapper = std::function<std::unique_ptr<Source>(std::unique_ptr<Source>)>;
// release_mapped_pages: mmap sources release the pages they copied from RSS (host-memory loads).
Result<SourceSet> OpenSources(const std::vector<std::string>& paths, const std::vector<bool>& used,
                              ReadMode mode, const DirectOptions& direct = {},
                              const SourceWrapper& wrap = nullptr,
                              bool release_mapped_pages = false);

}  // namespace hoist::transport
