#include "rank/placement.h"

#include <gtest/gtest.h>

namespace hoist::rank {
namespace {

// cgroup v2's cpu.max: "QUOTA PERIOD" in microseconds, or "max PERIOD" for no quota.
TEST(CpuQuota, CpuMaxLinesGiveWholeCpusRoundedUp) {
  EXPECT_EQ(CpusOfCpuMax("200000 100000"), 2);
  EXPECT_EQ(CpusOfCpuMax("150000 100000"), 2);  // 1.5 CPUs: two threads may each run half
  EXPECT_EQ(CpusOfCpuMax("50000 100000"), 1);
  EXPECT_EQ(CpusOfCpuMax("max 100000"), 0);
  EXPECT_EQ(CpusOfCpuMax(""), 0);
  EXPECT_EQ(CpusOfCpuMax("abc 100000"), 0);
  EXPECT_EQ(CpusOfCpuMax("100000 0"), 0);
  EXPECT_EQ(CpusOfCpuMax("-5 100000"), 0);
}

// Whatever the machine's cgroups, the quota is never negative and, when set, at least one CPU.
TEST(CpuQuota, ThisProcessQuotaIsNoneOrPositive) { EXPECT_GE(CgroupCpuQuota(), 0); }

}  // namespace
}  // namespace hoist::rank
