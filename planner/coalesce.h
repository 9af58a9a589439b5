// Merging a rank's copies: the one rule the plan builder and the dedup split both use.
//
// CoalesceCopies sorts copies by (file, src_offset, dst_offset) and merges each with its sorted
// predecessor when the two are one copy written in two parts: two single rows without a pitch
// that are contiguous in the file and in the arena become one wider row; two blocks of rows with
// the same width and pitches (pitch at least the width), the second starting exactly where the
// first's next row would, become one block with more rows. A merged plan moves exactly the same
// bytes to exactly the same places (tests/planner/coalesce_test.cc checks it byte by byte).
//
// Failure: none. Threading: pure.
#pragma once

#include <vector>

#include "proto/plan.pb.h"

namespace hoist::planner {

void CoalesceCopies(std::vector<proto::Copy>* copies);

}  // namespace hoist::planner
