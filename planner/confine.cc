#include "planner/confine.h"

namespace hoist::planner {

namespace fs = std::filesystem;

bool IsInside(const fs::path& path, const fs::path& root) {
  const fs::path rel = path.lexically_relative(root);
  if (rel.empty()) return false;
  const auto first = rel.begin();
  return first == rel.end() || *first != "..";
}

fs::path ContainmentRoot(const fs::path& dir) {
  const fs::path snapshots = dir.parent_path();
  const fs::path repo = snapshots.parent_path();
  if (snapshots.filename() == "snapshots" && repo.filename().string().rfind("models--", 0) == 0) {
    return repo;
  }
  return dir;
}

}  // namespace hoist::planner
