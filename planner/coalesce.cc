#include "planner/coalesce.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace hoist::planner {
namespace {

// One row with no pitch: a plain byte range.
bool Flat(const proto::Copy& c) { return c.rows() == 1 && c.src_pitch() == 0; }

// Rows of `width` at a pitch that separates them (a pitch of 0 would stack every row at once).
bool Strided(const proto::Copy& c) {
  return !Flat(c) && c.src_pitch() >= c.width() && c.dst_pitch() >= c.width() &&
         c.src_pitch() > 0 && c.dst_pitch() > 0;
}

// Whether `c` continues `p` (same file, sorted after it), and then merges it into `p`.
bool Absorb(proto::Copy& p, const proto::Copy& c) {
  if (p.file() != c.file()) return false;
  if (Flat(p) && Flat(c) && p.src_offset() + p.width() == c.src_offset() &&
      p.dst_offset() + p.width() == c.dst_offset()) {
    p.set_width(p.width() + c.width());
    return true;
  }
  if (Strided(p) && Strided(c) && p.width() == c.width() && p.src_pitch() == c.src_pitch() &&
      p.dst_pitch() == c.dst_pitch() &&
      p.src_offset() + p.rows() * p.src_pitch() == c.src_offset() &&
      p.dst_offset() + p.rows() * p.dst_pitch() == c.dst_offset()) {
    p.set_rows(p.rows() + c.rows());
    return true;
  }
  return false;
}

}  // namespace

void CoalesceCopies(std::vector<proto::Copy>* copies) {
  auto& cs = *copies;
  std::sort(cs.begin(), cs.end(), [](const proto::Copy& a, const proto::Copy& b) {
    return std::make_tuple(a.file(), a.src_offset(), a.dst_offset()) <
           std::make_tuple(b.file(), b.src_offset(), b.dst_offset());
  });
  std::size_t w = 0;
  for (std::size_t i = 0; i < cs.size(); ++i) {
    if (w > 0 && Absorb(cs[w - 1], cs[i])) continue;
    if (w != i) cs[w] = std::move(cs[i]);
    ++w;
  }
  cs.resize(w);
}

}  // namespace hoist::planner
