// What `--dedup auto` measures before the plan when a job spans hosts (planner::HostRates): each
// host's storage (is the checkpoint in its page cache; if not, how fast a sample reads with
// O_DIRECT) and the network from rank 0's host to every other host (a timed message on the
// control plane, the path host-arena forwarding takes).
//
// Ownership: none. Failure: the storage measure never fails (what it cannot measure is 0, i.e.
// unknown, and auto then keeps each host reading its own copy); the link probe returns the
// Comm's errors and Aborted, naming the rank, when a host leader does not answer within
// timeout_s. Threading: the Comm's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/comm.h"
#include "hoist/status.h"
#include "planner/dedup.h"
#include "proto/control.pb.h"

namespace hoist::coordinator {

// Bytes of one probe message, and of the O_DIRECT storage sample (at most).
inline constexpr std::uint64_t kLinkProbeBytes = 16ull << 20;
inline constexpr std::uint64_t kStorageSampleBytes = 64ull << 20;

// This host's storage for the checkpoint in model_dir (the shards a load reads, as
// planner::OpenCheckpoint lists them): cached when at least half their bytes are in the page
// cache, else the rate of an O_DIRECT read of up to kStorageSampleBytes spread over the largest
// shard (0: unknown, also when the checkpoint does not open). Test builds (HOIST_TEST_HOOKS) take
// HOIST_TEST_STORAGE_GIB_S instead when it is set.
struct StorageRate {
  double gib_s = 0;
  bool cached = false;
};
StorageRate MeasureStorage(const std::string& model_dir);

// Rank 0: the network's rate to `leader` (another host's first rank, in AnswerLinkProbe), the
// better of two timed kLinkProbeBytes messages and their acknowledgements, in GiB/s.
Result<double> ProbeLink(Comm& comm, int leader, double timeout_s);
// A host leader (local rank 0, not on rank 0's host): answers rank 0's two probes.
Status AnswerLinkProbe(Comm& comm, double timeout_s);

// Rank 0: the job's rates from every rank's hello (each host's first rank, rank 0 included,
// reports its storage) and a probe of every other host's first rank (the slowest link governs).
Result<planner::HostRates> MeasureHostRates(Comm& comm, const std::vector<proto::Hello>& hellos,
                                            double timeout_s);

}  // namespace hoist::coordinator
