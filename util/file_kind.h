// What a path that is not a regular file is, in words, for the errors of the places that refuse
// to open anything but regular files (planner/regular_file.h for metadata,
// transport/reading/source.h for shards): "a FIFO", "a directory", ...
//
// Failure: none. Ownership: returns views of static strings or new strings. Threading: pure.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

namespace hoist {

// "a regular file", "a FIFO", "a directory", "a character device", "a block device", "a socket",
// "a symbolic link" or "a special file", from a stat mode.
std::string_view FileKindName(mode_t mode);

// "<path> is a FIFO, not a regular file".
std::string NotARegularFile(const std::string& path, mode_t mode);

}  // namespace hoist
