// Test hooks of a job: the points where the mpirun failure tests make a rank fail, die, stop or
// misbehave (the CLI's hidden --inject-* flags install them: launch/cli.cc). The library only
// calls them; whatever kills or stops a process lives in the executable's callbacks.
//
// Compiled out of release builds: with HOIST_TEST_HOOKS 0 (CMake option HOIST_TEST_HOOKS, OFF
// when CMAKE_BUILD_TYPE is Release) the struct is empty and no call site exists. Ownership:
// plain values (the callbacks' captures are the caller's). Threading: after_plan, before_report
// and after_first_group run on the driver thread (the one that owns MPI); wrap_peer on the thread
// that calls RankJob::Open.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "transport/peers/peer.h"

#ifndef HOIST_TEST_HOOKS
#error "HOIST_TEST_HOOKS must be defined (0 or 1) for every target: the top CMakeLists.txt does"
#endif

namespace hoist::rank {

struct TestHooks {
#if HOIST_TEST_HOOKS
  // This rank's index in the plan: it fails with an injected I/O error once the plan arrived
  // (-1: none).
  int fail_rank = -1;
  // Called with this rank's index once the plan arrived, before its load starts.
  std::function<void(int)> after_plan;
  // Called with this rank's index just before its final report is sent to rank 0.
  std::function<void(int)> before_report;
  // Wraps this rank's peer once it is opened (e.g. transport::WrapFaultyPeer).
  std::function<std::unique_ptr<transport::Peer>(std::unique_ptr<transport::Peer>)> wrap_peer;
  // Called once, right after this rank issued its first exchange group.
  std::function<void()> after_first_group;
  // A plan format this rank says in its hello instead of its own (0: its own), as a rank of
  // another hoist build would.
  std::uint32_t hello_plan_format = 0;
#endif
};

}  // namespace hoist::rank
