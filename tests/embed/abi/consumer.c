/* An engine in C using libhoist.so through hoist/hoist_c.h, built twice (tests/CMakeLists.txt):
 * against the header from before hoist_load_options and hoist_tensor carried their size
 * (tests/embed/abi/v1/) and against today's, both run against today's library. It loads a model
 * on the host backend, reads every tensor, and checks that the library wrote nothing past the
 * caller's structs (a guard after each) and that the options it set were taken.
 *   consumer MODEL_DIR   exit 0: passed */
#include <hoist/hoist_c.h>
#include <stdio.h>
#include <string.h>

#define GUARD_BYTES 256

struct guarded_options {
  hoist_load_options options;
  unsigned char guard[GUARD_BYTES];
};

struct guarded_tensor {
  hoist_tensor tensor;
  unsigned char guard[GUARD_BYTES];
};

static int intact(const unsigned char* guard) {
  for (int i = 0; i < GUARD_BYTES; ++i) {
    if (guard[i] != 0xA5) return 0;
  }
  return 1;
}

static int fail(const char* what) {
  fprintf(stderr, "abi consumer (%s): %s: %s\n", HOIST_ABI_HEADER, what, hoist_last_error());
  return 1;
}

static int read_tensors(const hoist_model* m) {
  const size_t n = hoist_model_tensor_count(m);
  if (n == 0) return fail("no tensor");
  for (size_t i = 0; i < n; ++i) {
    struct guarded_tensor t;
    memset(t.guard, 0xA5, sizeof t.guard);
    if (hoist_model_tensor(m, i, &t.tensor) != HOIST_OK) return fail("hoist_model_tensor");
    if (!intact(t.guard)) return fail("hoist_model_tensor wrote past the caller's hoist_tensor");
    if (t.tensor.name == NULL || t.tensor.dtype == NULL || t.tensor.data == NULL ||
        t.tensor.bytes == 0 || t.tensor.ndim < 1) {
      return fail("a tensor without its fields");
    }
    struct guarded_tensor again;
    memset(again.guard, 0xA5, sizeof again.guard);
    if (hoist_model_find(m, t.tensor.name, &again.tensor) != HOIST_OK) return fail("find");
    if (!intact(again.guard)) return fail("hoist_model_find wrote past the caller's hoist_tensor");
    if (again.tensor.data != t.tensor.data) return fail("find gave another tensor");
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer MODEL_DIR\n");
    return 2;
  }
  struct guarded_options g;
  memset(g.guard, 0xA5, sizeof g.guard);
  hoist_load_options_init(&g.options);
  if (!intact(g.guard)) return fail("hoist_load_options_init wrote past the caller's struct");
  g.options.model = argv[1];
  if (hoist_load_options_set(&g.options, "device", "host") != HOIST_OK ||
      hoist_load_options_set(&g.options, "slots", "3") != HOIST_OK ||
      hoist_load_options_set(&g.options, "verify", "true") != HOIST_OK ||
      hoist_load_options_set(&g.options, "read_depth_mib", "0") != HOIST_OK) {
    return fail("hoist_load_options_set");
  }
  if (!intact(g.guard)) return fail("hoist_load_options_set wrote past the caller's struct");
  if (hoist_load_options_set(&g.options, "slot_mb", "3") != HOIST_INVALID_ARGUMENT) {
    return fail("an unknown key was taken");
  }
  hoist_model* m = NULL;
  if (hoist_load(&g.options, &m) != HOIST_OK) return fail("hoist_load");
  const int bad = read_tensors(m);
  if (hoist_model_release(m) != HOIST_OK) return fail("release");
  if (bad) return bad;
  printf("abi consumer (%s): passed\n", HOIST_ABI_HEADER);
  return 0;
}
