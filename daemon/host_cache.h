// The daemon's host cache (`hoist serve --host-cache`): what `hoist ctl release` keeps in pinned
// host memory so that `hoist ctl restore` can bring a rank's arena back without storage.
//
// Two kinds. A plain plan: a pinned copy of the whole arena (Capture copies device -> host;
// Restore allocates a new arena and copies it back in one DMA pass). A packed plan (a packed
// checkpoint, docs/PACKED.md): the rank's COMPRESSED bytes, laid out as the byte stream of the
// staged cut of its packed work (transport/staging/slot_plan.h: stored bytes and whole codec
// blocks, slot after slot, slots back to back without gaps), read with pread from the plan's files
// right after the load (page cache; no device traffic). Restore enqueues the plan's fills, copies
// the stored bytes straight from the cache into the new arena, and moves each slot's blocks into
// one of a few device slots, then decodes them there on a second stream through the Device seam
// (transport/devices/device.h: StreamWait, CreateDecoder, DecodeAsync, DecoderStatus).
//
// Ownership: a HostCache borrows the Device (which must outlive it) and owns the pinned buffer
// it allocated from that device (freed by the destructor). Restore returns a new arena the caller
// owns. Failure: allocation, copy or synchronisation errors are returned as a Status naming the
// sizes; a packed capture returns IoError naming the file and offset of a failed read (Corrupt
// from transport/packed/packed.h for a plan it cannot translate); a packed restore returns the
// decoder's Corrupt naming the shard, tensor and block of a damaged block; a failed restore frees
// what it allocated. Threading: one thread at a time (a packed capture reads on its own helper
// threads).
#pragma once

#include <cstdint>
#include <memory>

#include "hoist/status.h"
#include "proto/plan.pb.h"
#include "transport/devices/device.h"

namespace hoist::rank {

struct PackedCacheLayout;  // a packed cache's cut, decode set and fills (host_cache.cc)

struct RestoreTiming {
  std::uint64_t bytes = 0;        // original bytes restored: the arena (plain), the bytes the
                                  // plan's copies and fills write (packed: the payload)
  std::uint64_t moved_bytes = 0;  // bytes copied host -> device (packed: compressed and stored)
  double seconds = 0;             // after the arena's allocation to completion (host clock;
                                  // packed: the device slots, streams and decoder included)
  double dma_seconds = 0;         // the copy stream, first op to last (device clock)
  double decode_seconds = 0;      // packed: the decodes alone, summed over slots (device clock)
  double alloc_seconds = 0;       // the new arena's allocation
};

struct HostCacheOptions {
  std::uint64_t slot_bytes = 64ull << 20;  // packed: the cut's slot (at least the largest block)
  int device_slots = 4;                    // packed: device slots the blocks are decoded from
  int read_threads = 0;                    // packed capture: pread threads (0: cores, at most 8)
};

class HostCache {
 public:
  // Copies the whole arena into newly allocated pinned host memory (the plain kind).
  static Result<std::unique_ptr<HostCache>> Capture(transport::Device& device,
                                                    const transport::DeviceBuffer& arena);
  // The kind the plan calls for: packed when plan.packed_size() > 0 (rank_plan is one of the
  // plan's ranks; the arena is not read), plain otherwise.
  static Result<std::unique_ptr<HostCache>> Capture(transport::Device& device,
                                                    const transport::DeviceBuffer& arena,
                                                    const proto::LoadPlan& plan,
                                                    const proto::RankPlan& rank_plan,
                                                    const HostCacheOptions& options = {});
  ~HostCache();
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // Allocates a new arena on the device and fills it from the cache (AllocateArena, then Fill;
  // the arena is freed again when the fill fails).
  Result<transport::DeviceBuffer> Restore(RestoreTiming* timing);
  // The two halves of Restore, for a restore whose arena must exist (and be exported) before its
  // bytes land (daemon/serve.h). AllocateArena: an arena of arena_bytes(). Fill: the cache into
  // `arena` (at least arena_bytes()); on failure its contents are undefined and the caller, who
  // owns it, frees it. Fill leaves timing->alloc_seconds 0.
  Result<transport::DeviceBuffer> AllocateArena();
  Status Fill(const transport::DeviceBuffer& arena, RestoreTiming* timing);
  std::uint64_t arena_bytes() const;  // the arena a restore fills

  bool packed() const { return packed_ != nullptr; }
  std::uint64_t bytes() const { return buffer_.bytes; }  // pinned bytes held
  const std::byte* data() const { return buffer_.ptr; }
  std::uint64_t slots() const;  // packed: slots of the cut (0 for the plain kind)

 private:
  HostCache(transport::Device& device, transport::HostBuffer buffer);
  static Result<std::unique_ptr<HostCache>> CapturePacked(transport::Device& device,
                                                          const proto::LoadPlan& plan,
                                                          const proto::RankPlan& rank_plan,
                                                          const HostCacheOptions& options);
  Status CopyIn(const transport::DeviceBuffer& arena, double* dma_seconds);
  Status FillPacked(const transport::DeviceBuffer& arena, RestoreTiming* timing);

  transport::Device& device_;
  transport::HostBuffer buffer_;
  std::unique_ptr<PackedCacheLayout> packed_;
};

}  // namespace hoist::rank
