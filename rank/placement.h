// Where a rank's fill threads run: hoist owns its CPU placement, whatever the launcher bound.
//
// Under CpuBind::kAuto (the default) a rank takes the cores of its GPU's NUMA domain (all of the
// host's cores when it has one NUMA node, or for the host backend), divided evenly, by physical
// core, among the ranks of its node that share that domain: the plan says which ranks share a
// node, and each rank's GPU locality comes from sysfs (local_cpulist of its PCI device). The
// host's cores are hwloc's allowed cpuset (the cgroup's CPUs), not the process's affinity, so a
// launcher that bound each rank to one core (Open MPI does when it starts two or fewer
// processes) does not starve the fill threads. kLauncher keeps the affinity the process was
// started with; kNone binds nothing and uses every allowed core.
//
// The hwloc topology costs tens of milliseconds to load: WarmHostTopology() starts loading it on
// a background thread at start-up (beside MPI and the CUDA context); PlanCpus waits for it.
//
// Ownership: the topology is a process-wide singleton that lives until exit. A ThreadBinding
// restores the calling thread's CPU (and memory) binding when destroyed. Failure: PlanCpus fails
// only for an impossible request (InvalidArgument); whatever the OS refuses while binding is
// logged and binding is skipped. Threading: PlanCpus may run on any thread; a ThreadBinding
// affects only the thread that created it and the threads it starts while bound.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "util/enum_names.h"

namespace hoist::rank {

enum class CpuBind { kAuto, kLauncher, kNone };
// The one name table (the `cpu_bind` option's choices, in this order).
inline constexpr EnumName<CpuBind> kCpuBindNames[] = {
    {CpuBind::kAuto, "auto"},
    {CpuBind::kLauncher, "launcher"},
    {CpuBind::kNone, "none"},
};
constexpr std::optional<CpuBind> ParseCpuBind(std::string_view name) {
  return EnumFromName(kCpuBindNames, name);
}
constexpr std::string_view CpuBindName(CpuBind mode) { return NameOfEnum(kCpuBindNames, mode); }

// Starts loading the host topology in the background (idempotent, cheap to call again).
void WarmHostTopology();

// This rank among the ranks of its node: the PCI bus ids of the node's ranks' GPUs in rank
// order (empty strings for the host backend) and this rank's index in that list.
struct NodeRanks {
  std::vector<std::string> pci_bus_ids;
  int self = 0;
};

struct CpuPlan {
  CpuBind mode = CpuBind::kAuto;
  std::vector<int> cpus;  // OS CPU indices, ascending
  std::string list;       // "0-15,32-47"
  std::string how;        // one line for the log: what was chosen and why
  bool bind = false;      // whether the thread should be bound to `cpus`
};

Result<CpuPlan> PlanCpus(CpuBind mode, const NodeRanks& node);

// "0-3,8" for {0,1,2,3,8}.
std::string CpuListString(const std::vector<int>& cpus);

// The CPUs a cgroup v2 `cpu.max` line ("QUOTA PERIOD", e.g. "200000 100000") allows, rounded up:
// 2 here; 0 for "max ..." (no quota) or a line it cannot read.
int CpusOfCpuMax(std::string_view line);

// This process's CPU quota in CPUs: the tightest on its cgroup's path of cgroup v2's cpu.max, else
// v1's cpu.cfs_quota_us / cpu.cfs_period_us (found through /proc/self/cgroup); 0 when it has none
// or the files cannot be read. A container with a quota but a wide cpuset gets
// the quota's worth of fill threads by default, not one per visible CPU.
int CgroupCpuQuota();

class ThreadBinding {
 public:
  // Binds the calling thread to plan.cpus (when plan.bind) and, when bind_memory and the host
  // has several NUMA nodes, its memory policy to the NUMA nodes of those CPUs.
  static std::unique_ptr<ThreadBinding> Bind(const CpuPlan& plan, bool bind_memory);
  ~ThreadBinding();
  ThreadBinding(const ThreadBinding&) = delete;
  ThreadBinding& operator=(const ThreadBinding&) = delete;

 private:
  ThreadBinding();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hoist::rank
