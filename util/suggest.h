// "Did you mean": the candidate nearest to a mistyped word by edit distance, for unknown
// subcommands, flags, values and topology keys. Threading: pure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hoist {

// Levenshtein distance (insertions, deletions, substitutions; each costs 1).
int EditDistance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, or "" when none is close: a distance of at most 2, and at
// most a third of the word's length for short words' sake (at least 1). Ties: the first.
std::string Nearest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace hoist
