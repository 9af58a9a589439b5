// The bench tools' list options ("8,16", "contig,rows:W:P"): Split cuts a string at `sep`.
// Pure; an empty string gives no items.
#pragma once

#include <sstream>
#include <string>
#include <vector>

inline std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);) out.push_back(x);
  return out;
}
