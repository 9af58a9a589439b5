#include "rank/placement.h"

#include <hwloc.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <mutex>

namespace hoist::rank {
namespace {

// The host's topology, loaded once (cores, PUs and NUMA nodes only: the fastest load).
struct HostTopology {
  hwloc_topology_t topo = nullptr;
  std::string error;
};

std::shared_future<HostTopology*>& TopologyFuture() {
  static std::once_flag once;
  static std::shared_future<HostTopology*> future;
  std::call_once(once, [] {
    future = std::async(std::launch::async, [] {
               auto* t = new HostTopology();  // lives until exit
               hwloc_topology_t topo = nullptr;
               if (hwloc_topology_init(&topo) != 0) {
                 t->error = "hwloc_topology_init failed";
                 return t;
               }
               hwloc_topology_set_all_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
               for (hwloc_obj_type_t type : {HWLOC_OBJ_CORE, HWLOC_OBJ_PU, HWLOC_OBJ_NUMANODE}) {
                 hwloc_topology_set_type_filter(topo, type, HWLOC_TYPE_FILTER_KEEP_ALL);
               }
               if (hwloc_topology_load(topo) != 0) {
                 hwloc_topology_destroy(topo);
                 t->error = "hwloc_topology_load failed";
                 return t;
               }
               t->topo = topo;
               return t;
             }).share();
  });
  return future;
}

using Bitmap = std::unique_ptr<hwloc_bitmap_s, void (*)(hwloc_bitmap_t)>;
Bitmap NewBitmap() { return Bitmap(hwloc_bitmap_alloc(), hwloc_bitmap_free); }

std::vector<int> ToVector(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

// The allowed CPUs near the GPU at `pci_bus_id` (sysfs local_cpulist); all allowed CPUs for the
// host backend, an unknown device, or a device local to no allowed CPU.
Bitmap Domain(hwloc_topology_t topo, const std::string& pci_bus_id) {
  Bitmap set = NewBitmap();
  hwloc_bitmap_copy(set.get(), hwloc_topology_get_allowed_cpuset(topo));
  if (pci_bus_id.empty()) return set;
  std::string id = pci_bus_id;
  std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
  std::ifstream in("/sys/bus/pci/devices/" + id + "/local_cpulist");
  std::string line;
  if (!std::getline(in, line)) return set;
  Bitmap local = NewBitmap();
  if (hwloc_bitmap_list_sscanf(local.get(), line.c_str()) != 0) return set;
  hwloc_bitmap_and(local.get(), local.get(), set.get());
  if (hwloc_bitmap_iszero(local.get())) return set;
  return local;
}

// The PUs of `domain`, grouped by physical core, in core order.
std::vector<std::vector<int>> CoresOf(hwloc_topology_t topo, hwloc_const_bitmap_t domain) {
  std::vector<std::vector<int>> cores;
  Bitmap pus = NewBitmap();
  const int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(i));
    hwloc_bitmap_and(pus.get(), core->cpuset, domain);
    if (!hwloc_bitmap_iszero(pus.get())) cores.push_back(ToVector(pus.get()));
  }
  if (cores.empty()) {  // no core objects (some VMs): one PU a core
    for (int pu : ToVector(domain)) cores.push_back({pu});
  }
  return cores;
}

// Rank `index` of `count` sharing `cores`: an even, contiguous share of whole cores, or one PU
// when there are more ranks than cores.
std::vector<int> Share(const std::vector<std::vector<int>>& cores, int index, int count) {
  std::vector<int> out;
  const int n = static_cast<int>(cores.size());
  if (count <= n) {
    const int lo = index * n / count, hi = (index + 1) * n / count;
    for (int c = lo; c < hi; ++c) out.insert(out.end(), cores[c].begin(), cores[c].end());
  } else {
    std::vector<int> pus;
    for (const auto& c : cores) pus.insert(pus.end(), c.begin(), c.end());
    out.push_back(pus[static_cast<std::size_t>(index) % pus.size()]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> CurrentAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int i = 0; i < CPU_SETSIZE; ++i) {
    if (CPU_ISSET(i, &set)) out.push_back(i);
  }
  return out;
}

CpuPlan AutoPlan(hwloc_topology_t topo, const NodeRanks& node) {
  CpuPlan p;
  p.mode = CpuBind::kAuto;
  const std::string& mine = node.pci_bus_ids[static_cast<std::size_t>(node.self)];
  Bitmap domain = Domain(topo, mine);
  int index = 0, count = 0;
  for (std::size_t r = 0; r < node.pci_bus_ids.size(); ++r) {
    Bitmap other = Domain(topo, node.pci_bus_ids[r]);
    if (!hwloc_bitmap_isequal(other.get(), domain.get())) continue;
    if (static_cast<int>(r) == node.self) index = count;
    ++count;
  }
  const std::vector<std::vector<int>> cores = CoresOf(topo, domain.get());
  p.cpus = Share(cores, index, std::max(count, 1));
  p.list = CpuListString(p.cpus);
  p.bind = true;
  p.how = "cpus " + p.list + ": share " + std::to_string(index + 1) + " of " +
          std::to_string(count) + " of the " + std::to_string(cores.size()) + " cores near " +
          (mine.empty() ? std::string("this host (host backend)") : "GPU " + mine);
  return p;
}

}  // namespace

void WarmHostTopology() { (void)TopologyFuture(); }

int CpusOfCpuMax(std::string_view line) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || line.substr(0, space) == "max") return 0;
  long long quota = 0, period = 0;
  try {
    quota = std::stoll(std::string(line.substr(0, space)));
    period = std::stoll(std::string(line.substr(space + 1)));
  } catch (const std::exception&) {
    return 0;
  }
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::min<long long>((quota + period - 1) / period, 1 << 20));
}

namespace {

// The tightest quota on the way from cgroup `path` up to the root of the hierarchy mounted at
// `root`; `quota_of(dir)` reads one directory's (0: none).
template <typename QuotaOf>
int TightestQuota(const std::string& root, std::string path, const QuotaOf& quota_of) {
  int tightest = 0;
  while (true) {
    const int cpus = quota_of(root + (path == "/" ? std::string() : path));
    if (cpus > 0 && (tightest == 0 || cpus < tightest)) tightest = cpus;
    if (path.empty() || path == "/") break;
    const std::size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return tightest;
}

std::string FirstLine(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

int CgroupCpuQuota() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line, v2, v1;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) == 0) v2 = line.substr(3);  // the unified hierarchy
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    if (controllers.find(",cpu,") != std::string::npos) v1 = line.substr(b + 1);
  }
  int quota = 0;
  if (!v2.empty()) {
    quota = TightestQuota("/sys/fs/cgroup", v2, [](const std::string& dir) {
      return CpusOfCpuMax(FirstLine(dir + "/cpu.max"));
    });
  }
  if (quota == 0 && !v1.empty()) {  // cgroup v1: cpu.cfs_quota_us (-1: none) over the period
    quota = TightestQuota("/sys/fs/cgroup/cpu", v1, [](const std::string& dir) {
      return CpusOfCpuMax(FirstLine(dir + "/cpu.cfs_quota_us") + " " +
                          FirstLine(dir + "/cpu.cfs_period_us"));
    });
  }
  return quota;
}

std::string CpuListString(const std::vector<int>& cpus) {
  std::string s;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    s.append(s.empty() ? "" : ",").append(std::to_string(cpus[i]));
    if (j > i) s.append("-").append(std::to_string(cpus[j]));
    i = j + 1;
  }
  return s;
}

Result<CpuPlan> PlanCpus(CpuBind mode, const NodeRanks& node) {
  if (node.self < 0 || static_cast<std::size_t>(node.self) >= node.pci_bus_ids.size()) {
    return Status::InvalidArgument("cpu placement: rank index " + std::to_string(node.self) +
                                   " outside its node's " +
                                   std::to_string(node.pci_bus_ids.size()) + " ranks");
  }
  CpuPlan p;
  p.mode = mode;
  if (mode == CpuBind::kLauncher) {
    p.cpus = CurrentAffinity();
    p.list = CpuListString(p.cpus);
    p.how = "cpus " + p.list + ": as the launcher bound this process (--cpu-bind launcher)";
    return p;
  }
  HostTopology* t = TopologyFuture().get();
  if (t->topo == nullptr) {
    p.cpus = CurrentAffinity();
    p.list = CpuListString(p.cpus);
    p.how = "cpus " + p.list + ": " + t->error + ", kept the launcher's binding";
    return p;
  }
  if (mode == CpuBind::kNone) {
    p.cpus = ToVector(hwloc_topology_get_allowed_cpuset(t->topo));
    p.list = CpuListString(p.cpus);
    p.how = "cpus " + p.list + " allowed, nothing bound (--cpu-bind none)";
    return p;
  }
  return AutoPlan(t->topo, node);
}

struct ThreadBinding::State {
  cpu_set_t saved;
  bool cpus_bound = false;
  hwloc_topology_t topo = nullptr;  // the singleton; set when memory was bound
  Bitmap saved_mems = NewBitmap();
  hwloc_membind_policy_t saved_policy = HWLOC_MEMBIND_DEFAULT;
};

ThreadBinding::ThreadBinding() : state_(std::make_unique<State>()) {}

std::unique_ptr<ThreadBinding> ThreadBinding::Bind(const CpuPlan& plan, bool bind_memory) {
  std::unique_ptr<ThreadBinding> b(new ThreadBinding());
  State& s = *b->state_;
  if (plan.bind && !plan.cpus.empty() && sched_getaffinity(0, sizeof s.saved, &s.saved) == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : plan.cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    }
    if (sched_setaffinity(0, sizeof set, &set) == 0) {
      s.cpus_bound = true;
    } else {
      spdlog::warn("cpu placement: could not bind to cpus {}; keeping the current binding",
                   plan.list);
    }
  }
  HostTopology* t = plan.bind && bind_memory ? TopologyFuture().get() : nullptr;
  if (t == nullptr || t->topo == nullptr ||
      hwloc_get_nbobjs_by_type(t->topo, HWLOC_OBJ_NUMANODE) <= 1) {
    return b;
  }
  Bitmap cpus = NewBitmap(), nodes = NewBitmap();
  for (int c : plan.cpus) hwloc_bitmap_set(cpus.get(), static_cast<unsigned>(c));
  hwloc_cpuset_to_nodeset(t->topo, cpus.get(), nodes.get());
  const int flags = HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET;
  if (hwloc_get_membind(t->topo, s.saved_mems.get(), &s.saved_policy, flags) == 0 &&
      hwloc_set_membind(t->topo, nodes.get(), HWLOC_MEMBIND_BIND, flags) == 0) {
    s.topo = t->topo;
  } else {
    spdlog::warn("cpu placement: could not bind memory to the NUMA nodes of cpus {}", plan.list);
  }
  return b;
}

ThreadBinding::~ThreadBinding() {
  State& s = *state_;
  if (s.cpus_bound) sched_setaffinity(0, sizeof s.saved, &s.saved);
  if (s.topo == nullptr) return;
  const int flags = HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET;
  if (s.saved_policy == HWLOC_MEMBIND_DEFAULT || hwloc_bitmap_iszero(s.saved_mems.get())) {
    hwloc_set_membind(s.topo, hwloc_topology_get_complete_nodeset(s.topo), HWLOC_MEMBIND_DEFAULT,
                      flags);
  } else {
    hwloc_set_membind(s.topo, s.saved_mems.get(), s.saved_policy, flags);
  }
}

}  // namespace hoist::rank
