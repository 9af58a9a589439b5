// Binding the calling thread's CPUs and memory policy to the NUMA node nearest a GPU (hwloc), so
// that fill threads started afterwards and the staging memory they touch stay local.
//
// Ownership: a NumaBinding restores the thread's previous CPU and memory binding when destroyed.
// Failure: never fatal; anything hwloc cannot do is logged (spdlog) and binding is skipped. On a
// machine with one NUMA node, or without a PCI bus id, it is a logged no-op. Threading: affects
// only the calling thread (and threads it creates while bound).
#pragma once

#include <memory>
#include <string>

namespace hoist::rank {

class NumaBinding {
 public:
  // pci_bus_id: "0000:3b:00.0" (empty: skip).
  static std::unique_ptr<NumaBinding> BindNear(const std::string& pci_bus_id);
  ~NumaBinding();
  NumaBinding(const NumaBinding&) = delete;
  NumaBinding& operator=(const NumaBinding&) = delete;

  bool bound() const;
  const std::string& description() const;  // what was done, for the log and report

 private:
  NumaBinding();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hoist::rank
