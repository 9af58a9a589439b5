#include "launch/output_paths.h"

#include <filesystem>
#include <system_error>

#include "util/printable.h"

namespace hoist::launch {
namespace {

namespace fs = std::filesystem;

// The folder `path` would be created in ("." for a bare name).
fs::path ParentOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

Status Refuse(const std::string& flag, const std::string& path, const std::string& why) {
  return Status::InvalidArgument(flag + " " + Printable(path) + ": " + why);
}

}  // namespace

Status CheckOutputFiles(const OutputPaths& files) {
  for (const auto& [flag, path] : files) {
    if (path.empty()) continue;
    std::error_code ec;
    if (fs::is_directory(path, ec)) return Refuse(flag, path, "is a folder, not a file");
    const fs::path parent = ParentOf(path);
    if (!fs::exists(parent, ec)) {
      return Refuse(flag, path, "its folder " + Printable(parent.string()) + " does not exist");
    }
    if (!fs::is_directory(parent, ec)) {
      return Refuse(flag, path, Printable(parent.string()) + " is not a folder");
    }
  }
  return Status::Ok();
}

Status CheckDumpFolder(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return Status::Ok();
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    return fs::is_directory(dir, ec) ? Status::Ok() : Refuse(flag, dir, "is not a folder");
  }
  std::string leaf = dir;  // "out/dump/" is the folder out/dump, in out
  while (leaf.size() > 1 && leaf.back() == '/') leaf.pop_back();
  const fs::path parent = ParentOf(leaf);
  if (!fs::is_directory(parent, ec)) {
    return Refuse(flag, dir,
                  "its parent " + Printable(parent.string()) +
                      " does not exist (hoist creates the dump folder, not the folders above it)");
  }
  return Status::Ok();
}

}  // namespace hoist::launch
