// HumanBytes / HumanRate (util/units.h): unit boundaries, against values worked out by hand.
#include "util/units.h"

#include <gtest/gtest.h>

#include <limits>

namespace hoist {
namespace {

TEST(Units, BytesPickTheLargestUnitAboveOne) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1), "1 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(395520), "386.25 KiB");  // 386.25 * 1024
  EXPECT_EQ(HumanBytes(5u << 20), "5.00 MiB");
  EXPECT_EQ(HumanBytes(8044936192ull), "7.49 GiB");  // Qwen3-4B
  EXPECT_EQ(HumanBytes(3ull << 40), "3.00 TiB");
  EXPECT_EQ(HumanBytes(5000ull << 40), "5000.00 TiB");  // no unit above TiB
}

TEST(Units, Rates) {
  EXPECT_EQ(HumanRate(0), "0 B/s");
  EXPECT_EQ(HumanRate(512.7), "512 B/s");
  EXPECT_EQ(HumanRate(1.5 * 1024 * 1024), "1.50 MiB/s");
  EXPECT_EQ(HumanRate(48.0 * (1ull << 30)), "48.00 GiB/s");
  EXPECT_EQ(HumanRate(-1), "0 B/s");
  EXPECT_EQ(HumanRate(std::numeric_limits<double>::infinity()), "0 B/s");
  EXPECT_EQ(HumanRate(std::numeric_limits<double>::quiet_NaN()), "0 B/s");
}

}  // namespace
}  // namespace hoist
