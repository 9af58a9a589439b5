// The one table of a job's options (kOptions): each entry's canonical name, concern, type, help,
// default and range, and where its value lives in hoist::JobOptionSet (hoist/job_options.h). The
// surfaces derive from it: the topology file accepts exactly these keys (config/topology.h), the
// command line registers `--name` (with '_' written '-') for each (launch/job_flags.h), the
// Python module takes each as a keyword (python/hoist_py.cc); the C++ API's LoadOptions is a
// JobOptionSet, and the C API (hoist/hoist_c.h) takes each as a field and a key, which
// tests/config/option_table_test.cc and tests/embed check against this table.
//
// Deprecated spellings still read, each with a warning (kDeprecatedFlags, kDeprecatedStagingKey):
// the topology file's `staging: {slots, slot_mib, threads}` mapping (now top-level keys) and
// `--staging KIND` (now
// `--pinning`).
//
// Failure: SetOption returns InvalidArgument naming the option. Threading: pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "config/limits.h"
#include "hoist/job_options.h"
#include "hoist/status.h"
#include "planner/dedup.h"
#include "planner/plan_options.h"
#include "rank/device_kind.h"
#include "rank/placement.h"
#include "transport/devices/device.h"
#include "transport/reading/read_modes.h"
#include "util/enum_names.h"

namespace hoist::config {

enum class Concern { kSelection, kStaging, kPeer, kOutputs };
enum class OptionType { kString, kInt, kDouble, kBool };

// Where an option's value lives in a JobOptionSet.
using OptionField = std::variant<std::optional<std::string>*, std::optional<int>*,
                                 std::optional<double>*, std::optional<bool>*>;

struct OptionInfo {
  std::string_view name;  // the YAML key; --name with '_' -> '-'; the API field; the keyword
  Concern concern;        // the struct of hoist/job_options.h that holds it
  OptionType type;
  bool plan;  // shapes the plan: `hoist plan` takes it too
  // One line, for --help and the Python docstring; for the load's whole numbers, also the
  // subject of the range error ("the number of fill threads must be 1 to 1024").
  std::string_view help;
  // Names: "a | b | c", from the enum's one name table (util/enum_names.h); empty for numbers
  // and free strings.
  std::string_view choices;
  // The default as text SetOption converts; "" for none (the model) or one the help line states
  // and the resolution picks (read_depth_mib's depends on the ranks of the node).
  std::string_view default_is;
  double lo = 0, hi = 0;         // numbers: the accepted range (inclusive), for help and checks
  bool zero_is_default = false;  // numbers: 0 also accepted, meaning the default
  OptionField (*field)(JobOptionSet&) = nullptr;
};

#define HOIST_FIELD(f) +[](JobOptionSet& o) -> OptionField { return &o.f; }

inline constexpr OptionInfo kOptions[] = {
    {"model", Concern::kSelection, OptionType::kString, true,
     "checkpoint folder, or a Hugging Face repo id owner/name[@revision] in the local cache "
     "(never downloaded)",
     "", "", 0, 0, false, HOIST_FIELD(model)},
    {"tp", Concern::kSelection, OptionType::kInt, true, "tensor-parallel size", "", "1", 1,
     planner::kMaxWorld, false, HOIST_FIELD(tp)},
    {"ep", Concern::kSelection, OptionType::kInt, true,
     "expert-parallel size: the world size, or 0 for off", "", "0", 0, planner::kMaxWorld, false,
     HOIST_FIELD(ep)},
    {"dp", Concern::kSelection, OptionType::kInt, true, "data-parallel groups (without ep)", "",
     "1", 1, planner::kMaxWorld, false, HOIST_FIELD(dp)},
    {"layout", Concern::kSelection, OptionType::kString, true,
     "output names and fusion (docs/LAYOUT.md)", kEnumChoices<planner::kLayoutNames>, "fused", 0, 0,
     false, HOIST_FIELD(layout)},
    {"placement", Concern::kSelection, OptionType::kString, true, "expert placement under ep",
     kEnumChoices<planner::kPlacementNames>, "linear", 0, 0, false, HOIST_FIELD(placement)},
    {"unexpected_tensors", Concern::kSelection, OptionType::kString, true,
     "checkpoint tensors no family rule knows", kEnumChoices<planner::kUnexpectedTensorsNames>,
     "warn", 0, 0, false, HOIST_FIELD(unexpected_tensors)},
    {"device", Concern::kStaging, OptionType::kString, false, "where the arena lives",
     kEnumChoices<rank::kDeviceKindNames>, "auto", 0, 0, false, HOIST_FIELD(device)},
    {"read", Concern::kStaging, OptionType::kString, false, "how the checkpoint is read",
     kEnumChoices<transport::kReadModeNames>, "auto", 0, 0, false, HOIST_FIELD(read)},
    {"pinning", Concern::kStaging, OptionType::kString, false,
     "how the staging ring is pinned: register (touch + cudaHostRegister) or mallochost",
     kEnumChoices<transport::kStagingKindNames>, "auto", 0, 0, false, HOIST_FIELD(pinning)},
    {"slots", Concern::kStaging, OptionType::kInt, false, "the number of staging slots", "", "0", 1,
     kLimits.max_slots, true, HOIST_FIELD(slots)},
    {"slot_mib", Concern::kStaging, OptionType::kInt, false, "the staging slot size in MiB", "",
     "0", 1, kLimits.max_slot_mib, true, HOIST_FIELD(slot_mib)},
    {"threads", Concern::kStaging, OptionType::kInt, false, "the number of fill threads", "", "0",
     1, kLimits.max_threads, true, HOIST_FIELD(threads)},
    {"chunk_kib", Concern::kStaging, OptionType::kInt, false, "the fill chunk in KiB", "", "0", 1,
     kLimits.max_chunk_kib, true, HOIST_FIELD(chunk_kib)},
    {"read_depth_mib", Concern::kStaging, OptionType::kInt, false,
     "the ring's depth in MiB when a load reads wholly cold (unset: 2048 for a rank alone on its "
     "node, 1024 where ranks share one; 0: the ring only)",
     "", "", 0, kLimits.max_read_depth_mib, false, HOIST_FIELD(read_depth_mib)},
    {"cpu_bind", Concern::kStaging, OptionType::kString, false,
     "where fill threads run: auto (the GPU's NUMA cores, shared among the node's ranks), "
     "launcher (as mpirun bound them) or none",
     kEnumChoices<rank::kCpuBindNames>, "auto", 0, 0, false, HOIST_FIELD(cpu_bind)},
    {"numa", Concern::kStaging, OptionType::kBool, false,
     "bind staging memory to the NUMA nodes of the fill threads' cores", "", "true", 0, 0, false,
     HOIST_FIELD(numa)},
    {"dedup", Concern::kPeer, OptionType::kString, true,
     "read bytes several ranks need once per node (or job) and forward them (auto: node where "
     "it pays)",
     kEnumChoices<planner::kDedupNames>, "auto", 0, 0, false, HOIST_FIELD(dedup)},
    {"dedup_step_kib", Concern::kPeer, OptionType::kInt, true,
     "KiB of shared bytes per exchange step, 64 MiB by default", "", "0",
     static_cast<double>(planner::kMinDedupStepBytes >> 10),
     static_cast<double>(planner::kMaxDedupStepBytes >> 10), true, HOIST_FIELD(dedup_step_kib)},
    {"peer_timeout_s", Concern::kPeer, OptionType::kDouble, false,
     "seconds any wait for another rank may take before the job fails naming it", "", "120", 0,
     kLimits.max_peer_timeout_s, false, HOIST_FIELD(peer_timeout_s)},
    {"verify", Concern::kOutputs, OptionType::kBool, false,
     "prove every device byte equals the checkpoint's", "", "false", 0, 0, false,
     HOIST_FIELD(verify)},
};

#undef HOIST_FIELD

// The entry named `name` (canonical spelling), or nullptr.
const OptionInfo* FindOption(std::string_view name);

// "slot_mib" -> "--slot-mib".
std::string FlagName(std::string_view name);

// Options that still read under an old spelling, with the warning that says what to write.
struct Deprecated {
  std::string_view old_spelling;  // as the user wrote it
  std::string_view option;        // the option it sets (kOptions)
  std::string_view warning;
};
inline constexpr Deprecated kDeprecatedFlags[] = {
    {"--staging", "pinning", "--staging is deprecated: it is --pinning now (same values)"},
};
inline constexpr std::string_view kDeprecatedStagingKey =
    "'staging: {slots, slot_mib, threads}' is deprecated: write slots, slot_mib and threads as "
    "top-level keys";

// Sets option `info` of `set` from text (a flag's or the C API's value): "true"/"false"/"1"/"0"
// for bools, whole numbers for ints, numbers for doubles. InvalidArgument naming `where` when
// the text does not convert.
Status SetOption(const OptionInfo& info, std::string_view text, const std::string& where,
                 JobOptionSet* set);

// The value of option `info` in `set` as text ("" when unset), for messages and tests.
std::string OptionText(const OptionInfo& info, JobOptionSet& set);

}  // namespace hoist::config
