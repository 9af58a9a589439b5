// Keeping a checkpoint's files inside its folder: the folder symlinks may not leave, and the
// test of a canonical path against it. Shared by the safetensors checkpoint reader
// (planner/checkpoint.cc) and the packed index reader (planner/packed_index.cc).
// Failure: none (pure path arithmetic, no file system access). Threading: pure functions.
#pragma once

#include <filesystem>

namespace hoist::planner {

// True when canonical `path` is `root` or below it (both canonical).
bool IsInside(const std::filesystem::path& path, const std::filesystem::path& root);

// The folder symlinks may not leave. Usually the model folder itself; for a HuggingFace hub
// cache snapshot (<cache>/models--org--name/snapshots/<revision>/, whose files are symlinks into
// <cache>/models--org--name/blobs/) it is the repository folder models--org--name, so that the
// most common layout on disk loads while links anywhere else are still refused.
std::filesystem::path ContainmentRoot(const std::filesystem::path& dir);

}  // namespace hoist::planner
