#include "rank/numa.h"

#include <hwloc.h>
#include <spdlog/spdlog.h>

#include <fstream>

namespace hoist::rank {

struct NumaBinding::State {
  hwloc_topology_t topo = nullptr;
  hwloc_bitmap_t saved_cpus = nullptr;
  hwloc_bitmap_t saved_mems = nullptr;
  hwloc_membind_policy_t saved_policy = HWLOC_MEMBIND_DEFAULT;
  bool cpus_bound = false;
  bool mems_bound = false;
  std::string description;
};

NumaBinding::NumaBinding() : state_(std::make_unique<State>()) {}

bool NumaBinding::bound() const { return state_->cpus_bound || state_->mems_bound; }
const std::string& NumaBinding::description() const { return state_->description; }

namespace {

// "0", "0-1", ...: /sys/devices/system/node/online without its newline; empty when unreadable.
std::string OnlineNumaNodes() {
  std::ifstream in("/sys/devices/system/node/online");
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::unique_ptr<NumaBinding> NumaBinding::BindNear(const std::string& pci_bus_id) {
  std::unique_ptr<NumaBinding> b(new NumaBinding());
  State& s = *b->state_;
  if (pci_bus_id.empty()) {
    s.description = "no PCI device (host backend): NUMA binding skipped";
    spdlog::debug("{}", s.description);
    return b;
  }
  // Loading the hwloc topology costs tens of milliseconds hot and hundreds cold (it walks
  // sysfs); one look at the kernel's list of online nodes settles the common one-node case.
  if (OnlineNumaNodes() == "0") {
    s.description = "one NUMA node: binding not needed";
    spdlog::info("{} (GPU {})", s.description, pci_bus_id);
    return b;
  }
  if (hwloc_topology_init(&s.topo) != 0) {
    s.topo = nullptr;
    s.description = "hwloc_topology_init failed: NUMA binding skipped";
    spdlog::warn("{}", s.description);
    return b;
  }
  hwloc_topology_set_io_types_filter(s.topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(s.topo) != 0) {
    s.description = "hwloc_topology_load failed: NUMA binding skipped";
    spdlog::warn("{}", s.description);
    return b;
  }
  const int nodes = hwloc_get_nbobjs_by_type(s.topo, HWLOC_OBJ_NUMANODE);
  if (nodes <= 1) {
    s.description = "one NUMA node: binding not needed";
    spdlog::info("{} (GPU {})", s.description, pci_bus_id);
    return b;
  }
  hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(s.topo, pci_bus_id.c_str());
  hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(s.topo, pci) : nullptr;
  if (anc == nullptr || anc->cpuset == nullptr || anc->nodeset == nullptr) {
    s.description = "GPU " + pci_bus_id + " not found in the hwloc topology: binding skipped";
    spdlog::warn("{}", s.description);
    return b;
  }
  s.saved_cpus = hwloc_bitmap_alloc();
  s.saved_mems = hwloc_bitmap_alloc();
  const bool have_cpus = hwloc_get_cpubind(s.topo, s.saved_cpus, HWLOC_CPUBIND_THREAD) == 0;
  const bool have_mems = hwloc_get_membind(s.topo, s.saved_mems, &s.saved_policy,
                                           HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0;
  char* cpus = nullptr;
  char* mems = nullptr;
  hwloc_bitmap_list_asprintf(&cpus, anc->cpuset);
  hwloc_bitmap_list_asprintf(&mems, anc->nodeset);
  if (have_cpus && hwloc_set_cpubind(s.topo, anc->cpuset, HWLOC_CPUBIND_THREAD) == 0) {
    s.cpus_bound = true;
  }
  if (have_mems && hwloc_set_membind(s.topo, anc->nodeset, HWLOC_MEMBIND_BIND,
                                     HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0) {
    s.mems_bound = true;
  }
  s.description = "GPU " + pci_bus_id + ": cpus " + (cpus ? cpus : "?") +
                  (s.cpus_bound ? " bound" : " NOT bound") + ", memory nodes " +
                  (mems ? mems : "?") + (s.mems_bound ? " bound" : " NOT bound");
  std::free(cpus);
  std::free(mems);
  if (s.cpus_bound && s.mems_bound) {
    spdlog::info("NUMA: {}", s.description);
  } else {
    spdlog::warn("NUMA: {}", s.description);
  }
  return b;
}

NumaBinding::~NumaBinding() {
  State& s = *state_;
  if (s.topo != nullptr) {
    if (s.cpus_bound) hwloc_set_cpubind(s.topo, s.saved_cpus, HWLOC_CPUBIND_THREAD);
    if (s.mems_bound) {
      if (s.saved_policy == HWLOC_MEMBIND_DEFAULT || hwloc_bitmap_iszero(s.saved_mems)) {
        hwloc_set_membind(s.topo, hwloc_topology_get_complete_nodeset(s.topo),
                          HWLOC_MEMBIND_DEFAULT, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
      } else {
        hwloc_set_membind(s.topo, s.saved_mems, s.saved_policy,
                          HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
      }
    }
    hwloc_topology_destroy(s.topo);
  }
  if (s.saved_cpus) hwloc_bitmap_free(s.saved_cpus);
  if (s.saved_mems) hwloc_bitmap_free(s.saved_mems);
}

}  // namespace hoist::rank
