// Byte counts and rates for people: the largest binary unit (B, KiB, MiB, GiB, TiB) that keeps
// the number at least 1, so a 400 KiB model reads "400.00 KiB", not "0.000 GiB".
//
//   HumanBytes(0) == "0 B", HumanBytes(1023) == "1023 B", HumanBytes(1536) == "1.50 KiB",
//   HumanBytes(8044936192) == "7.49 GiB"; HumanRate(1.5 * 1024 * 1024) == "1.50 MiB/s".
//
// Failure: none (negative or non-finite rates print as "0 B/s"). Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>

namespace hoist {

std::string HumanBytes(std::uint64_t bytes);
std::string HumanRate(double bytes_per_second);

}  // namespace hoist
