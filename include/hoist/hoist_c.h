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

#include <float.h>
#include <limits.h>
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

/* Growing the ABI: hoist_load_options and hoist_tensor start with their size (and the options
 * with a magic number and the header's version), set by their initializers from the caller's
 * header. The library reads and writes only the bytes the caller's struct has, so a program built
 * against an older hoist_c.h runs against a newer libhoist.so (fields it does not know are
 * unset), and new fields are only ever appended. A program built before the size fields existed
 * calls the same names and keeps working: those are kept with their old layout
 * (tests/embed/abi/). */
#define HOIST_C_API_VERSION 2
#define HOIST_LOAD_OPTIONS_MAGIC 0x686f6973u /* "hois" */

/* One "unset" convention: an unset number or boolean is HOIST_UNSET (an unset double
 * HOIST_UNSET_DOUBLE), an unset string or pointer NULL. Unset takes the topology file's value,
 * else the default. Booleans: 0 false, 1 true. */
#define HOIST_UNSET INT_MIN
#define HOIST_UNSET_DOUBLE (-DBL_MAX)

/* The options of hoist/job_options.h, each under its own name (as in the topology file, on the
 * command line and in the C++ API). Start from HOIST_LOAD_OPTIONS_INITIALIZER (or
 * hoist_load_options_init), which sets the size, magic and version and leaves every option unset;
 * hoist_load_options_set sets any option by name from text. */
typedef struct {
  size_t size;               /* sizeof(hoist_load_options) in the caller's header */
  unsigned int magic;        /* HOIST_LOAD_OPTIONS_MAGIC */
  int version;               /* HOIST_C_API_VERSION of the caller's header */
  const char* topology_file; /* NULL: none */
  const char* model;         /* checkpoint folder; NULL: the topology's */
  int tp, dp;
  int ep;                /* 0: expert parallelism off */
  const char* layout;    /* fused | hf */
  const char* placement; /* linear | round_robin */
  const char* device;    /* auto | cuda | host */
  const char* read;      /* auto | buffered | direct | mmap | pageable | registered */
  int threads;           /* fill threads; 0: the rank's cpus */
  int verify;            /* 1: prove every arena byte; 0: do not */
  int rank;              /* without a communicator: the plan's rank this process loads (0) */
  const void* mpi_comm;  /* pointer to the engine's MPI_Comm, or NULL */
  /* Optional engine allocator for the arena (device == CUDA ordinal, -1 on the host). */
  void* (*allocate)(uint64_t bytes, int device, void* user);
  void (*deallocate)(void* ptr, uint64_t bytes, int device, void* user);
  void* allocator_user;
  const char* unexpected_tensors; /* error | warn | ignore */
  const char* pinning;            /* auto | register | mallochost: how staging is pinned */
  int slots;                      /* staging slots; 0: the default */
  int slot_mib;                   /* MiB per staging slot; 0: the default */
  int chunk_kib;                  /* KiB per fill task; 0: the default */
  const char* cpu_bind;           /* auto | launcher | none */
  int numa;                       /* 1: bind to the GPU's NUMA node; 0: do not */
  const char* dedup;              /* auto | none | node | job */
  int dedup_step_kib;             /* 0: the default */
  double peer_timeout_s;
  int read_depth_mib; /* MiB of ring a wholly cold load widens to; 0: the ring only; unset: by
                         the ranks on the node (hoist/job_options.h) */
} hoist_load_options;

#define HOIST_LOAD_OPTIONS_INITIALIZER                                                           \
  {                                                                                              \
    sizeof(hoist_load_options), HOIST_LOAD_OPTIONS_MAGIC, HOIST_C_API_VERSION, NULL, NULL,       \
        HOIST_UNSET, HOIST_UNSET, HOIST_UNSET, NULL, NULL, NULL, NULL, HOIST_UNSET, HOIST_UNSET, \
        0, NULL, NULL, NULL, NULL, NULL, NULL, HOIST_UNSET, HOIST_UNSET, HOIST_UNSET, NULL,      \
        HOIST_UNSET, NULL, HOIST_UNSET, HOIST_UNSET_DOUBLE, HOIST_UNSET                          \
  }

/* One tensor of a model. Start from HOIST_TENSOR_INITIALIZER; the library fills the fields the
 * caller's struct has and sets `size` to the bytes it filled. */
typedef struct {
  size_t size; /* sizeof(hoist_tensor) in the caller's header */
  const char* name;
  const char* dtype; /* safetensors spelling: BF16, F32, F8_E4M3, ... */
  int ndim;
  const int64_t* shape;
  const int64_t* strides; /* in elements */
  void* data;             /* device (CUDA) or host address */
  uint64_t bytes;
  uint64_t arena_offset;
} hoist_tensor;

#define HOIST_TENSOR_INITIALIZER \
  { sizeof(hoist_tensor), NULL, NULL, 0, NULL, NULL, NULL, 0, 0 }

/* Sets every option unset, and the size, magic and version (as HOIST_LOAD_OPTIONS_INITIALIZER):
 * hoist_load_options_init(&o) passes the caller's sizeof. */
void hoist_load_options_init_sized(hoist_load_options* options, size_t size);
#define hoist_load_options_init(options) \
  hoist_load_options_init_sized((options), sizeof(*(options)))
/* Sets option `key` (its name in hoist/job_options.h, e.g. "slot_mib") from text: a whole number, a
 * number, true/false/1/0 or a name. A string value is kept by pointer: it must outlive
 * hoist_load. HOIST_INVALID_ARGUMENT for an unknown key (naming the nearest), a value that
 * does not convert, or an option the caller's struct is too old to hold. */
int hoist_load_options_set(hoist_load_options* options, const char* key, const char* value);
int hoist_load(const hoist_load_options* options, hoist_model** out);
/* timeout_ms <= 0: the default (10 s). */
int hoist_attach(const char* socket_path, int timeout_ms, hoist_model** out);
/* hoist_attach with AttachOptions::pending_ok: a daemon restoring its arena (or in its initial
 * load, `hoist serve --serve-while-loading`) answers at once; the model is then pending
 * (hoist_model_pending) until hoist_model_wait, which returns HOIST_OK once the bytes are resident
 * or the restore's (load's) error, naming the rank. Its waits are whole-model and host-side
 * (hoist_model_stream_wait blocks the calling thread); hoist_model_cancel does nothing. */
int hoist_attach_pending(const char* socket_path, int timeout_ms, hoist_model** out);

size_t hoist_model_tensor_count(const hoist_model* model);
/* Tensor `index` (or the one named `name`) into *out, as far as the caller's hoist_tensor goes:
 * hoist_model_tensor(m, i, &t) passes the caller's sizeof. HOIST_NOT_FOUND when no tensor has
 * that name. */
int hoist_model_tensor_sized(const hoist_model* model, size_t index, hoist_tensor* out,
                             size_t size);
int hoist_model_find_sized(const hoist_model* model, const char* name, hoist_tensor* out,
                           size_t size);
#define hoist_model_tensor(model, index, out) \
  hoist_model_tensor_sized((model), (index), (out), sizeof(*(out)))
#define hoist_model_find(model, name, out) \
  hoist_model_find_sized((model), (name), (out), sizeof(*(out)))
/* is_cuda: 1 for a CUDA arena, 0 for host memory; ordinal: CUDA ordinal or -1. */
int hoist_model_device(const hoist_model* model, int* is_cuda, int* ordinal);
int hoist_model_rank(const hoist_model* model, int* rank, int* world);
/* A DLPack export of tensor `index` (hoist/hoist_dlpack.h; raw != 0: unsigned-integer dtypes). */
int hoist_model_dlpack(const hoist_model* model, size_t index, int raw,
                       struct DLManagedTensor** out);
/* Releases the weights and frees the handle (NULL is a no-op). A pending model (below) is
 * cancelled and waited for first (collective under MPI). */
int hoist_model_release(hoist_model* model);

/* Loads that stream behind the engine (hoist::LoadAsync; docs/EMBEDDING.md, "Addresses first").
 * hoist_load_async returns once this rank's arena exists: every tensor's address, shape and dtype
 * is final while its bytes stream in, layer group by layer group ("embeddings", "layer 0" ..
 * "layer N-1", "head"). Values may be trusted only after hoist_model_wait returned HOIST_OK (or
 * work on a stream that passed hoist_model_stream_wait). hoist_load_async and hoist_model_wait are
 * collective under MPI (every rank, from the thread that owns MPI); hoist_model_wait gives the
 * job's verdict, naming the rank that failed, and returns it again on later calls. A model from
 * hoist_load or hoist_attach is complete: these calls return at once (hoist_attach_pending above
 * may return a pending one). */
int hoist_load_async(const hoist_load_options* options, hoist_model** out);
int hoist_model_wait(hoist_model* model);
/* Stops the streaming (any thread); hoist_model_wait then returns HOIST_ABORTED. */
int hoist_model_cancel(hoist_model* model);
/* 1 while hoist_model_wait has not returned. */
int hoist_model_pending(const hoist_model* model, int* pending);
/* Bytes handed to the device so far and in all, leading layer groups landed and groups in all;
 * any pointer may be NULL. */
int hoist_model_progress(const hoist_model* model, uint64_t* bytes_done, uint64_t* bytes_total,
                         int* layers_ready, int* layers);
/* Layer group `layer`'s name (owned by the model), and the group of tensor `index`. */
int hoist_model_layer_name(const hoist_model* model, int layer, const char** name);
int hoist_model_tensor_layer(const hoist_model* model, size_t index, int* layer);
/* This rank only, on the host: whether group `layer` landed (its bytes final), and a blocking wait
 * for it (HOIST_OK, or this rank's load error). */
int hoist_model_layer_ready(const hoist_model* model, int layer, int* ready);
int hoist_model_wait_layer(const hoist_model* model, int layer);
/* Orders work on `stream` (a cudaStream_t; NULL: the legacy default stream) after group `layer`
 * (-1: every byte) landed, without blocking the host (CUDA); on the host backend it blocks until
 * then. A failed load releases the wait too: check hoist_model_wait. */
int hoist_model_stream_wait(const hoist_model* model, int layer, void* stream);
/* The message of this thread's last failed call ("" when none). */
const char* hoist_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* HOIST_HOIST_C_H_ */
