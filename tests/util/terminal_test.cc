#include "util/terminal.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

namespace hoist {
namespace {

// Sets (or unsets, with nullptr) an environment variable for one test, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(LogColours, LaunchersAndNoColorTurnThemOff) {
  ScopedEnv a("NO_COLOR", nullptr), b("OMPI_COMM_WORLD_SIZE", nullptr), c("PMI_RANK", nullptr),
      d("PMIX_RANK", nullptr), e("SLURM_PROCID", nullptr);
  EXPECT_TRUE(LogColoursAllowed());
  {
    ScopedEnv mpi("OMPI_COMM_WORLD_SIZE", "2");
    EXPECT_FALSE(LogColoursAllowed());
  }
  {
    ScopedEnv slurm("SLURM_PROCID", "0");
    EXPECT_FALSE(LogColoursAllowed());
  }
  {
    ScopedEnv no("NO_COLOR", "1");
    EXPECT_FALSE(LogColoursAllowed());
  }
  {
    ScopedEnv empty("NO_COLOR", "");  // no-color.org: an empty value does not count
    EXPECT_TRUE(LogColoursAllowed());
  }
}

TEST(UnderLauncher, EachLaunchersVariableCountsAndNoColorDoesNot) {
  ScopedEnv a("NO_COLOR", "1"), b("OMPI_COMM_WORLD_SIZE", nullptr), c("PMI_RANK", nullptr),
      d("PMIX_RANK", nullptr), e("SLURM_PROCID", nullptr);
  EXPECT_FALSE(UnderLauncher());
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    ScopedEnv launcher(name, "0");
    EXPECT_TRUE(UnderLauncher()) << name;
  }
}

}  // namespace
}  // namespace hoist
