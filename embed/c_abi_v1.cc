#include "embed/c_abi_v1.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace hoist::internal {
namespace {

// v1 number -> today's: `unset_was` (0, or -1 for ep and read_depth_mib) becomes HOIST_UNSET.
int Num(int v, int unset_was = 0) { return v == unset_was ? HOIST_UNSET : v; }
int NumV1(int v, int unset_was = 0) { return v == HOIST_UNSET ? unset_was : v; }
// v1 boolean (0 unset, > 0 true, < 0 false) -> today's (HOIST_UNSET, 1, 0), and back.
int Bool(int v) { return v == 0 ? HOIST_UNSET : (v > 0 ? 1 : 0); }
int BoolV1(int v) { return v == HOIST_UNSET ? 0 : (v != 0 ? 1 : -1); }

}  // namespace

bool IsSizedOptions(const void* p) {
  std::size_t size = 0;
  unsigned int magic = 0;
  std::memcpy(&size, p, sizeof size);
  if (size < offsetof(hoist_load_options, version) || size > (1u << 16)) return false;
  std::memcpy(&magic, static_cast<const char*>(p) + offsetof(hoist_load_options, magic),
              sizeof magic);
  return magic == HOIST_LOAD_OPTIONS_MAGIC;
}

hoist_load_options WholeOptions(const hoist_load_options& caller) {
  hoist_load_options whole = HOIST_LOAD_OPTIONS_INITIALIZER;
  std::memcpy(&whole, &caller, std::min(caller.size, sizeof whole));
  whole.size = sizeof whole;
  return whole;
}

hoist_load_options FromV1(const LoadOptionsV1& v) {
  hoist_load_options o = HOIST_LOAD_OPTIONS_INITIALIZER;
  o.topology_file = v.topology_file;
  o.model = v.model;
  o.tp = Num(v.tp);
  o.dp = Num(v.dp);
  o.ep = Num(v.ep, -1);
  o.layout = v.layout;
  o.placement = v.placement;
  o.device = v.device;
  o.read = v.read;
  o.threads = Num(v.threads);
  o.verify = Bool(v.verify);
  o.rank = v.rank;
  o.mpi_comm = v.mpi_comm;
  o.allocate = v.allocate;
  o.deallocate = v.deallocate;
  o.allocator_user = v.allocator_user;
  o.unexpected_tensors = v.unexpected_tensors;
  o.pinning = v.pinning;
  o.slots = Num(v.slots);
  o.slot_mib = Num(v.slot_mib);
  o.chunk_kib = Num(v.chunk_kib);
  o.cpu_bind = v.cpu_bind;
  o.numa = Bool(v.numa);
  o.dedup = v.dedup;
  o.dedup_step_kib = Num(v.dedup_step_kib);
  o.peer_timeout_s = v.peer_timeout_s == 0 ? HOIST_UNSET_DOUBLE : v.peer_timeout_s;
  o.read_depth_mib = Num(v.read_depth_mib, -1);
  return o;
}

LoadOptionsV1 ToV1(const hoist_load_options& o) {
  LoadOptionsV1 v{};
  v.topology_file = o.topology_file;
  v.model = o.model;
  v.tp = NumV1(o.tp);
  v.dp = NumV1(o.dp);
  v.ep = NumV1(o.ep, -1);
  v.layout = o.layout;
  v.placement = o.placement;
  v.device = o.device;
  v.read = o.read;
  v.threads = NumV1(o.threads);
  v.verify = BoolV1(o.verify);
  v.rank = o.rank;
  v.mpi_comm = o.mpi_comm;
  v.allocate = o.allocate;
  v.deallocate = o.deallocate;
  v.allocator_user = o.allocator_user;
  v.unexpected_tensors = o.unexpected_tensors;
  v.pinning = o.pinning;
  v.slots = NumV1(o.slots);
  v.slot_mib = NumV1(o.slot_mib);
  v.chunk_kib = NumV1(o.chunk_kib);
  v.cpu_bind = o.cpu_bind;
  v.numa = BoolV1(o.numa);
  v.dedup = o.dedup;
  v.dedup_step_kib = NumV1(o.dedup_step_kib);
  v.peer_timeout_s = o.peer_timeout_s == HOIST_UNSET_DOUBLE ? 0 : o.peer_timeout_s;
  v.read_depth_mib = NumV1(o.read_depth_mib, -1);
  return v;
}

LoadOptionsV1 InitialV1() {
  const hoist_load_options unset = HOIST_LOAD_OPTIONS_INITIALIZER;
  return ToV1(unset);
}

TensorV1 ToV1(const hoist_tensor& t) {
  return TensorV1{t.name, t.dtype, t.ndim, t.shape, t.strides, t.data, t.bytes, t.arena_offset};
}

}  // namespace hoist::internal
