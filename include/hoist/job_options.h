// The options of a hoist job, one typed struct per concern. Every field has ONE name, the same
// everywhere: the topology file's key (`slot_mib: 32`), the command line's flag with '_' written
// '-' (`--slot-mib 32`; a bool is `--verify` / `--no-verify`), the C++ field (`o.slot_mib = 32`),
// the C API's field and key (hoist/hoist_c.h) and the Python keyword (`hoist.load(slot_mib=32)`).
// The one list of them, with each option's type, help, default and range, is config/option_table.h
// (kOptions); hoist's tests check every surface against it.
//
// An unset field falls back to the topology file, then to the default. Values are checked when
// the job is resolved (hoist::Load, `hoist load`): a bad one is InvalidArgument naming the
// option and its range.
// Threading: plain data.
#pragma once

#include <optional>
#include <string>

namespace hoist {

// What to load and how it is split.
struct SelectionOptions {
  std::optional<std::string> model;      // checkpoint folder or hub id owner/name[@revision]
  std::optional<int> tp, ep, dp;         // tensor parallel, expert parallel (0: off), data parallel
  std::optional<std::string> layout;     // fused | hf
  std::optional<std::string> placement;  // linear | round_robin (experts under ep)
  std::optional<std::string> unexpected_tensors;  // error | warn | ignore
};

// How a rank moves its bytes: the backend, the read mode and the pinned staging ring.
struct StagingOptions {
  std::optional<std::string> device;    // auto | cuda | host
  std::optional<std::string> read;      // auto | buffered | direct | mmap | pageable | registered
  std::optional<std::string> pinning;   // auto | register | mallochost: how staging is pinned
  std::optional<int> slots;             // staging slots (0: the default)
  std::optional<int> slot_mib;          // MiB per slot (0: the default)
  std::optional<int> threads;           // fill threads (0: the default)
  std::optional<int> chunk_kib;         // KiB per fill task (0: max(64, slot size / 16))
  std::optional<int> read_depth_mib;    // MiB of ring a load read wholly cold widens to, a
                                        // fill thread per slot (0: the ring only; unset: by the
                                        // ranks on the node, the option table's help says how)
  std::optional<std::string> cpu_bind;  // auto | launcher | none: where fill threads run
  std::optional<bool> numa;             // bind to the GPU's NUMA node (default true)
};

// Bytes several ranks need: read once, forwarded between ranks.
struct PeerOptions {
  std::optional<std::string> dedup;      // auto | none | node | job
  std::optional<int> dedup_step_kib;     // shared KiB per exchange step (0: the default)
  std::optional<double> peer_timeout_s;  // bound on any wait for another rank
};

// What the load proves or writes besides the arena.
struct OutputOptions {
  std::optional<bool> verify;  // prove every arena byte equals the checkpoint's
};

struct JobOptionSet : SelectionOptions, StagingOptions, PeerOptions, OutputOptions {};

}  // namespace hoist
