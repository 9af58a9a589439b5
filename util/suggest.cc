#include "util/suggest.h"

#include <algorithm>
#include <numeric>

namespace hoist {

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string Nearest(std::string_view word, const std::vector<std::string>& candidates) {
  const int limit = std::min(2, std::max(1, static_cast<int>(word.size()) / 3));
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace hoist
