// The C ABI from before hoist_load_options and hoist_tensor carried their size (hoist_c.h as of
// commit 39dd35b, tests/embed/abi/v1/): its two structs as programs built then still pass them
// to libhoist.so, under the names they called (hoist_load_options_init, hoist_load_options_set,
// hoist_load, hoist_model_tensor, hoist_model_find), and their conversion to today's. Unset was
// 0 for numbers (ep and read_depth_mib: -1), 0 for booleans (> 0 true, < 0 false) and 0.0 for
// the timeout; today it is HOIST_UNSET / HOIST_UNSET_DOUBLE (hoist/hoist_c.h).
//
// Ownership: plain values (string pointers are the caller's). Failure: none. Threading: pure.
#pragma once

#include <cstdint>

#include "hoist/hoist_c.h"

namespace hoist::internal {

struct LoadOptionsV1 {
  const char* topology_file;
  const char* model;
  int tp, dp;
  int ep;
  const char* layout;
  const char* placement;
  const char* device;
  const char* read;
  int threads;
  int verify;
  int rank;
  const void* mpi_comm;
  void* (*allocate)(uint64_t bytes, int device, void* user);
  void (*deallocate)(void* ptr, uint64_t bytes, int device, void* user);
  void* allocator_user;
  const char* unexpected_tensors;
  const char* pinning;
  int slots;
  int slot_mib;
  int chunk_kib;
  const char* cpu_bind;
  int numa;
  const char* dedup;
  int dedup_step_kib;
  double peer_timeout_s;
  int read_depth_mib;
};

struct TensorV1 {
  const char* name;
  const char* dtype;
  int ndim;
  const int64_t* shape;
  const int64_t* strides;
  void* data;
  uint64_t bytes;
  uint64_t arena_offset;
};

// Whether `p` points at a hoist_load_options that carries its size and magic (a LoadOptionsV1
// starts with a pointer: NULL or an address far above any struct's size).
bool IsSizedOptions(const void* p);

// A caller's sized options as a whole current struct: the bytes it has, the rest unset.
hoist_load_options WholeOptions(const hoist_load_options& caller);

hoist_load_options FromV1(const LoadOptionsV1& v1);
LoadOptionsV1 ToV1(const hoist_load_options& o);
LoadOptionsV1 InitialV1();
TensorV1 ToV1(const hoist_tensor& t);

}  // namespace hoist::internal
