// Output paths a command was given, checked before it reads a byte: a failed load or plan must not
// be the first to learn that its report cannot be written. Owned by launch/.
//
// Failure: Status::InvalidArgument naming the flag and the path (exit 2) when a file's folder does
// not exist or is not a folder, when a file path is a folder, or when a dump folder's parent does
// not exist (hoist creates the dump folder itself, never the folders above it). Nothing is
// created or written here.
// Threading: stateless; checks the file system at call time only.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "hoist/status.h"

namespace hoist::launch {

// {flag, path} pairs; empty paths are skipped.
using OutputPaths = std::vector<std::pair<std::string, std::string>>;

// Each path must be a writable place for a new or existing file.
Status CheckOutputFiles(const OutputPaths& files);

// `dir` (may be empty) must be a folder or a new name in an existing folder.
Status CheckDumpFolder(const std::string& flag, const std::string& dir);

}  // namespace hoist::launch
