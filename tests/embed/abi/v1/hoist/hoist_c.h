/* The C API header as released before hoist_load_options and hoist_tensor carried their size
 * (commit 39dd35b), kept verbatim for the ABI test (tests/embed/abi/): a consumer built against
 * it must run against the current libhoist.so. Do not edit. */
/* hoist's C API: the same loader and daemon attach as hoist/hoist.h, for engines in C or other
 * languages' FFIs.
 *
 * Ownership: hoist_load / hoist_attach return a hoist_model the caller gives back with
 * hoist_model_release (which frees the weights, unless DLPack exports still hold them). Strings
 * and arrays in a hoist_tensor belong to the model and live as long as it. Failure: every call
 * returns a hoist_code (HOIST_OK == 0); the message of the last failure on this thread is
 * hoist_last_error(). Threading: hoist_load under MPI is collective; a model may be read from any
 * thread. */
#ifndef HOIST_HOIST_C_H_
#define HOIST_HOIST_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The same values as hoist::Code. */
typedef enum {
  HOIST_OK = 0,
  HOIST_INVALID_ARGUMENT = 1,
  HOIST_NOT_FOUND = 2,
  HOIST_CORRUPT = 3,
  HOIST_IO_ERROR = 4,
  HOIST_UNSUPPORTED = 5,
  HOIST_FAILED_PRECONDITION = 6,
  HOIST_RESOURCE_EXHAUSTED = 7,
  HOIST_ABORTED = 8,
  HOIST_INTERNAL = 9
} hoist_code;

typedef struct hoist_model hoist_model;
struct DLManagedTensor;

/* The options of hoist/job_options.h, each under its own name (as in the topology file, on the
 * command line and in the C++ API). Unset values (NULL, 0, ep -1; booleans 0) take the topology
 * file's value, else the default: hoist_load_options_init sets them all. Booleans: > 0 true,
 * < 0 false. hoist_load_options_set sets any of them by name from text. */
typedef struct {
  const char* topology_file; /* NULL: none */
  const char* model;         /* checkpoint folder; NULL: the topology's */
  int tp, dp;                /* 0: unset */
  int ep;                    /* -1: unset (0: expert parallelism off) */
  const char* layout;        /* fused | hf */
  const char* placement;     /* linear | round_robin */
  const char* device;        /* auto | cuda | host */
  const char* read;          /* auto | buffered | direct | mmap | pageable | registered */
  int threads;               /* fill threads; 0: unset */
  int verify;                /* > 0: prove every arena byte; < 0: do not; 0: unset */
  int rank;                  /* without a communicator: the plan's rank this process loads */
  const void* mpi_comm;      /* pointer to the engine's MPI_Comm, or NULL */
  /* Optional engine allocator for the arena (device == CUDA ordinal, -1 on the host). */
  void* (*allocate)(uint64_t bytes, int device, void* user);
  void (*deallocate)(void* ptr, uint64_t bytes, int device, void* user);
  void* allocator_user;
  const char* unexpected_tensors; /* error | warn | ignore */
  const char* pinning;            /* auto | register | mallochost: how staging is pinned */
  int slots;                      /* staging slots; 0: unset */
  int slot_mib;                   /* MiB per staging slot; 0: unset */
  int chunk_kib;                  /* KiB per fill task; 0: unset */
  const char* cpu_bind;           /* auto | launcher | none */
  int numa;                       /* > 0: bind to the GPU's NUMA node; < 0: do not; 0: unset */
  const char* dedup;              /* auto | none | node | job */
  int dedup_step_kib;             /* 0: unset */
  double peer_timeout_s;          /* 0: unset */
  int read_depth_mib; /* MiB of ring a wholly cold load widens to; 0: the ring only; -1: unset
                         (2048 for a rank alone on its node, 1024 where ranks share one) */
} hoist_load_options;

typedef struct {
  const char* name;
  const char* dtype; /* safetensors spelling: BF16, F32, F8_E4M3, ... */
  int ndim;
  const int64_t* shape;
  const int64_t* strides; /* in elements */
  void* data;             /* device (CUDA) or host address */
  uint64_t bytes;
  uint64_t arena_offset;
} hoist_tensor;

void hoist_load_options_init(hoist_load_options* options);
/* Sets option `key` (its name in hoist/job_options.h, e.g. "slot_mib") from text: a whole number, a
 * number, true/false/1/0 or a name. A string value is kept by pointer: it must outlive
 * hoist_load. HOIST_INVALID_ARGUMENT for an unknown key (naming the nearest) or a value that
 * does not convert. */
int hoist_load_options_set(hoist_load_options* options, const char* key, const char* value);
int hoist_load(const hoist_load_options* options, hoist_model** out);
/* timeout_ms <= 0: the default (10 s). */
int hoist_attach(const char* socket_path, int timeout_ms, hoist_model** out);

size_t hoist_model_tensor_count(const hoist_model* model);
int hoist_model_tensor(const hoist_model* model, size_t index, hoist_tensor* out);
/* HOIST_NOT_FOUND when no tensor has that name. */
int hoist_model_find(const hoist_model* model, const char* name, hoist_tensor* out);
/* is_cuda: 1 for a CUDA arena, 0 for host memory; ordinal: CUDA ordinal or -1. */
int hoist_model_device(const hoist_model* model, int* is_cuda, int* ordinal);
int hoist_model_rank(const hoist_model* model, int* rank, int* world);
/* A DLPack export of tensor `index` (hoist/hoist_dlpack.h; raw != 0: unsigned-integer dtypes). */
int hoist_model_dlpack(const hoist_model* model, size_t index, int raw,
                       struct DLManagedTensor** out);
/* Releases the weights and frees the handle (NULL is a no-op). */
int hoist_model_release(hoist_model* model);
/* The message of this thread's last failed call ("" when none). */
const char* hoist_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HOIST_HOIST_C_H_ */
