// Dedup planning: read the bytes that several ranks need once per node (or once per job) and
// forward them to the other ranks that need them.
//
// Sharing arises when several ranks need the same source bytes: replicated tensors, kv heads
// replicated when tp > kv heads, dense and attention weights replicated across dp groups or EP
// ranks. ApplyDedup works on a built plan. Ranks are grouped (by node under DEDUP_NODE, all
// ranks under DEDUP_JOB); within a group every rank's copies are cut at every boundary of every
// other rank's copies over the same bytes (1-D ranges by byte, 2-D copies by row on the same
// (pitch, width, column) lattice), so each elementary piece is needed by a definite set of ranks:
//  - needed by one rank: that rank reads it (RankPlan.own_reads);
//  - needed by several: one of them reads it (the one with the fewest bytes read so far, counting
//    its own reads first; ties go to the previous piece's reader, then the lowest rank) and sends
//    it to the others. Shared pieces are taken in file order, cut to at most step_bytes, and
//    grouped into exchange steps of about step_bytes (RankPlan.steps), so reading, forwarding and
//    the rest of the load overlap, and no rank waits for a whole tensor before forwarding it.
// A transfer is one contiguous arena range on both sides (the planner's arena images are packed:
// dst_pitch == width); a 2-D copy whose arena image is strided is never shared (its rank reads it).
// So with dedup each byte is read from storage once per group: the sum of the group's
// storage_bytes equals the union of the source bytes its ranks need.
//
// On a compact plan (plan_set.h ApplyCompactDedup), DEDUP_JOB runs this once over one member per
// class and stripes each class's bytes over its replicas (planner/job_dedup.h).
//
// RankPlan.copies is left as it was (the arena's contract: verification uses it, and a rank run
// without peers reads every copy). Every rank gets the same number of steps (empty ones padded).
// Between any two ranks, sends and recvs pair up in list order, step by step.
//
// Failure: InvalidArgument for a bad option; Internal if the plan's copies are inconsistent.
// Threading: pure function.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "util/enum_names.h"

namespace hoist::planner {

// The default exchange step: forwarding is a stage of one pipeline run (rank/exchange.h), so a
// step costs one group of transfers; 64 MiB keeps the first forward early and the tail short.
inline constexpr std::uint64_t kDefaultDedupStepBytes = 64ull << 20;

// What DEDUP_AUTO knows of a job's hosts, measured before the plan (coordinator/link_probe.h);
// all zero where nothing was measured (`hoist plan`, one host, another mode).
struct HostRates {
  double net_gib_s = 0;      // the slowest link from rank 0's host to another host
  double storage_gib_s = 0;  // the slowest storage read of the hosts that read it uncached
  bool cached = false;       // every host has the checkpoint in its page cache
  bool measured() const { return net_gib_s > 0 && (cached || storage_gib_s > 0); }
};

struct DedupOptions {
  proto::Dedup mode = proto::DEDUP_NONE;
  // Shared bytes per exchange step and group (>= 1).
  std::uint64_t step_bytes = kDefaultDedupStepBytes;
  // DEDUP_AUTO: the ranks load into GPUs that reach each other directly (NVLink or PCIe
  // peer-to-peer), so forwarding a byte costs no host memory bandwidth.
  bool gpu_peers = false;
  HostRates rates{};  // DEDUP_AUTO across hosts
  // DEDUP_JOB on a compact plan (planner/job_dedup.h): the chunk K; 0 chooses it.
  std::uint64_t chunk_bytes = 0;
};

// Below this share of a node's bytes saved, DEDUP_AUTO keeps every rank reading its own bytes.
inline constexpr double kAutoDedupMinSaving = 0.10;

// Sets plan->dedup, plan->dedup_reason, the ranks' storage_bytes (their copies' bytes under
// DEDUP_NONE) and, under NODE or JOB, their steps, own_reads and peer_group. DEDUP_AUTO becomes
// NODE when the ranks load into GPUs with direct peer access and node dedup saves at least
// kAutoDedupMinSaving of the bytes read from storage (replicas, replicated tensors), else NONE;
// dedup_reason says which and why. Across nodes (hosts) AUTO forwards between them (JOB) only
// where options.rates were measured, the checkpoint is not in the page cache, the network
// between hosts is faster than reading storage, and job dedup reads at least
// kAutoDedupMinSaving fewer bytes than the node choice; otherwise each node reads its own copy
// (a page-cache or local-NVMe read outruns common cluster links), and the reason gives the
// figures, or says that nothing was measured.
Status ApplyDedup(const DedupOptions& options, proto::LoadPlan* plan);

// DEDUP_AUTO over either form of plan: `apply` carries out a mode (ApplyDedup on a built plan,
// ApplyCompactDedup on a compact one, plan_set.h); `world` and `nodes` are the plan's rank and
// node counts. Chooses NODE or NONE as ApplyDedup says and sets dedup_reason, noting what AUTO
// means when the plan spans nodes.
using DedupApplier = std::function<Status(const DedupOptions&, proto::LoadPlan*)>;
Status ApplyAutoDedup(const DedupOptions& options, std::uint64_t world, std::uint64_t nodes,
                      const DedupApplier& apply, proto::LoadPlan* plan);

// The one name table (the `dedup` option's choices, in this order).
inline constexpr EnumName<proto::Dedup> kDedupNames[] = {
    {proto::DEDUP_AUTO, "auto"},
    {proto::DEDUP_NONE, "none"},
    {proto::DEDUP_NODE, "node"},
    {proto::DEDUP_JOB, "job"},
};

// A name of kDedupNames; "none" for a value not in it.
const char* DedupName(proto::Dedup mode);
bool ParseDedup(const std::string& name, proto::Dedup* out);

}  // namespace hoist::planner
