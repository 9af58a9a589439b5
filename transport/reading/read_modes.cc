#include "transport/reading/read_modes.h"

#include <utility>

namespace hoist::transport {
namespace {

// Auto mode's two sources of one file: the cold one (O_DIRECT, or buffered once O_DIRECT was
// found unsupported: *direct_ok turns false and the set's note says so), opened first, and the
// page-cache one, a mapping made only when a piece is found resident.
Status OpenAuto(const std::string& path, const DirectOptions& direct, const SourceWrapper& wrap,
                bool release_mapped_pages, bool* direct_ok, SourceSet* set, FileSources* out) {
  Result<std::unique_ptr<Source>> cold = Status::Internal("unset");
  if (*direct_ok) {
    cold = OpenDirectSource(path, direct);
    if (!cold.ok() && cold.status().code() == Code::kUnsupported) {
      *direct_ok = false;
      set->note =
          "O_DIRECT unsupported (" + cold.status().message() + "); auto reads cold ranges buffered";
    }
  }
  if (!*direct_ok) cold = OpenBufferedSource(path);
  if (!cold.ok()) return std::move(cold).status();
  std::unique_ptr<Source> primary =
      OpenMmapSourceLazily(path, (*cold)->size(), release_mapped_pages);
  if (wrap) {
    primary = wrap(std::move(primary));
    *cold = wrap(std::move(*cold));
  }
  out->primary = primary.get();
  out->cold = cold->get();
  set->owned.push_back(std::move(primary));
  set->owned.push_back(std::move(*cold));
  return Status::Ok();
}

}  // namespace

Result<SourceSet> OpenSources(const std::vector<std::string>& paths, const std::vector<bool>& used,
                              ReadMode mode, const DirectOptions& direct, const SourceWrapper& wrap,
                              bool release_mapped_pages) {
  SourceSet set;
  set.files.resize(paths.size());
  bool direct_ok = true;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    if (f < used.size() && !used[f]) continue;
    if (mode == ReadMode::kAuto) {
      HOIST_RETURN_IF_ERROR(
          OpenAuto(paths[f], direct, wrap, release_mapped_pages, &direct_ok, &set, &set.files[f]));
      continue;
    }
    Result<std::unique_ptr<Source>> primary = Status::Internal("unset");
    switch (mode) {
      case ReadMode::kBuffered:
        primary = OpenBufferedSource(paths[f]);
        break;
      case ReadMode::kDirect:
        primary = OpenDirectSource(paths[f], direct);
        break;
      case ReadMode::kAuto:
      case ReadMode::kMmap:
      case ReadMode::kPageable:
      case ReadMode::kRegistered:
        primary = OpenMmapSource(paths[f], release_mapped_pages && mode == ReadMode::kMmap);
        break;
    }
    if (!primary.ok()) return std::move(primary).status();
    if (wrap) *primary = wrap(std::move(*primary));
    set.files[f].primary = primary->get();
    set.owned.push_back(std::move(*primary));
  }
  return set;
}

}  // namespace hoist::transport
