// Replica-striped job dedup (--dedup job): each byte of the job read once, planned once per class
// and expanded by every rank on its own.
//
// A compact plan has `classes` rank plans; rank r runs class c = r % classes as replica
// d = r / classes of R = world / classes. Rank 0 plans ApplyDedup's job assignment over ONE
// member per class (plan_set.cc): the class template, whose member c says what class c reads
// (steps' reads, own_reads), sends to other classes and receives from them (peers are class
// indexes). Each rank expands its own exchange from its class's member and LoadPlan.job (R, K,
// the step) by a rule both sides of every transfer compute alike, so pairing holds by
// construction:
//  - chunks: chunk j of class c is its arena bytes [j*K, (j+1)*K); replica (j + c) % R owns it;
//  - every byte class c reads in the template whose arena image is contiguous is cut at the
//    chunk bounds and read by the owner of its chunk only, which sends it to every other replica
//    of c (same arena offset: replicas share the class plan), in the template's step; class c's
//    contiguous own_reads are so forwarded too, in extra steps after the template's, cut into
//    steps of about step_bytes by cumulative bytes in list order;
//  - a template send of class c to class c' is cut at c's chunk bounds; the owner of each piece
//    sends it to every replica of c'; each replica of c' receives it from that owner;
//  - own_reads strided in the arena stay every replica's own reads (never forwarded).
// With R == 1 nothing is cut: the exchange is the class template's, as job dedup always was.
// Between two ranks the transfers of a step are listed in the order of the template lists both
// walk, so they pair in list order (rank/exchange.h). Each rank's storage bytes are its chunks'
// pieces (about 1/R of its class's) plus its strided own reads; over the job, each byte needed
// is read once.
//
// Ownership: values in, values out. Failure: ExpandJobExchange and ExpandJobView are Corrupt
// when the plan's integers are inconsistent (no classes, a world they do not divide).
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"

namespace hoist::planner {

// One piece of a cut copy: the chunk (arena offset / K) its arena bytes lie in.
struct ChunkCopy {
  std::uint64_t chunk = 0;
  proto::Copy copy;
};

// `c` (contiguous in the arena: rows == 1 or dst_pitch == width) cut at every multiple of `k`
// of its arena bytes, in arena order. A 2-D copy cut mid-row gives the rows before the cut as
// one 2-D copy, the cut row as two 1-D copies, and the rows after it as a 2-D copy (1-row pieces
// are 1-D). The pieces move exactly the bytes of `c` to the same places. k == 0: not cut.
std::vector<ChunkCopy> CutCopyAtChunks(const proto::Copy& c, std::uint64_t k);

// Whether a copy's arena image is contiguous (so it can be cut and forwarded).
bool ContiguousInArena(const proto::Copy& c);

// K for a job plan: about the smallest class's forwarded bytes over (8 * replicas), within
// [1 MiB, step_bytes], a multiple of 4 KiB where that leaves at least 4 KiB.
std::uint64_t ChooseChunkBytes(std::uint64_t min_class_forwarded_bytes, std::uint32_t replicas,
                               std::uint64_t step_bytes);

// The bytes class member `m` forwards to its replicas (its contiguous reads and own reads).
std::uint64_t ForwardedBytes(const proto::MemberExchange& m);

// Extra steps class member `m` needs after the template's for its forwarded own reads (0 with
// one replica).
std::uint32_t ExtraJobSteps(const proto::MemberExchange& m, const proto::JobDedup& job,
                            std::uint32_t replicas);

// Rank `rank`'s steps (job.steps of them), own_reads, storage_bytes and peer_group (0) from its
// class's template member `m`, in a world of `world` ranks.
Status ExpandJobExchange(const proto::MemberExchange& m, const proto::JobDedup& job,
                         std::uint32_t world, std::uint32_t rank, proto::RankPlan* rp);

// A view of a DEDUP_JOB plan (LoadPlan.view): rank `rank`'s plan in it gets its exchange from its
// job_exchange (which is cleared). A no-op for any other plan, or one already expanded.
Status ExpandJobView(proto::LoadPlan* view, std::uint32_t rank);

// Per rank of class c's replicas, what the job assignment gives it, without expanding it.
struct JobRankFigures {
  std::uint64_t storage_bytes = 0;  // read from storage
  std::uint64_t sends = 0;          // transfers it sends
  std::uint64_t forwarded = 0;      // bytes it sends
};
// Figures of replicas 0..R-1 of the class whose template member is `m` (class `c`), in one pass
// over its lists.
std::vector<JobRankFigures> JobClassFigures(const proto::MemberExchange& m,
                                            const proto::JobDedup& job, std::uint32_t c,
                                            std::uint32_t replicas);

}  // namespace hoist::planner
