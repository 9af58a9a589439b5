// The C API (include/hoist/hoist_c.h) over the C++ one. Its options are the table's
// (config/option_table.h) under the same names: kCFields maps each to its field of
// hoist_load_options; tests/embed check that every table entry has one.
//
// The ABI: a caller's hoist_load_options and hoist_tensor carry their size; the library reads and
// writes only that many bytes (embed/c_abi_v1.h keeps the layout from before the size fields, for
// programs built then: their calls arrive at the same names and are converted).
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/option_table.h"
#include "embed/c_abi_v1.h"
#include "embed/resolve_options.h"
#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "hoist/hoist_dlpack.h"
#include "util/printable.h"
#include "util/suggest.h"

struct hoist_model {
  hoist::Model model;
};

namespace {

thread_local std::string g_last_error;

int Report(const hoist::Status& s) {
  g_last_error = s.ok() ? "" : s.ToString();
  return static_cast<int>(s.code());
}

// Fills as much of the caller's hoist_tensor as its `size` covers (a newer library never writes
// past an older caller's struct) and sets size to the bytes filled.
int Fill(const hoist::Tensor& t, hoist_tensor* caller, std::size_t size) {
  if (size < offsetof(hoist_tensor, name)) {
    return Report(hoist::Status::InvalidArgument("hoist_tensor size " + std::to_string(size) +
                                                 " is too small"));
  }
  hoist_tensor full{};
  hoist_tensor* out = &full;
  out->name = t.name.c_str();
  out->dtype = t.dtype.c_str();
  out->ndim = static_cast<int>(t.shape.size());
  out->shape = t.shape.data();
  out->strides = t.strides.data();
  out->data = t.data;
  out->bytes = t.bytes;
  out->arena_offset = t.arena_offset;
  full.size = std::min(size, sizeof full);
  std::memcpy(caller, &full, full.size);
  return Report(hoist::Status::Ok());
}

int Null(const char* what) {
  return Report(hoist::Status::InvalidArgument(std::string(what) + " is NULL"));
}

using CString = const char* hoist_load_options::*;
using CInt = int hoist_load_options::*;
using CDouble = double hoist_load_options::*;

struct CField {
  const char* name;  // the option's name in config/option_table.h
  std::variant<CString, CInt, CDouble> field;
};

// The bytes of `o` a caller's struct of `size` bytes holds: the field ends within it.
template <typename M>
bool Holds(std::size_t size, M hoist_load_options::*field) {
  const hoist_load_options probe{};
  const auto* base = reinterpret_cast<const char*>(&probe);
  const auto* at = reinterpret_cast<const char*>(&(probe.*field));
  return static_cast<std::size_t>(at - base) + sizeof(probe.*field) <= size;
}

using O = hoist_load_options;
const CField kCFields[] = {
    {"model", &O::model},
    {"tp", &O::tp},
    {"ep", &O::ep},
    {"dp", &O::dp},
    {"layout", &O::layout},
    {"placement", &O::placement},
    {"unexpected_tensors", &O::unexpected_tensors},
    {"device", &O::device},
    {"read", &O::read},
    {"pinning", &O::pinning},
    {"slots", &O::slots},
    {"slot_mib", &O::slot_mib},
    {"threads", &O::threads},
    {"chunk_kib", &O::chunk_kib},
    {"read_depth_mib", &O::read_depth_mib},
    {"cpu_bind", &O::cpu_bind},
    {"numa", &O::numa},
    {"dedup", &O::dedup},
    {"dedup_step_kib", &O::dedup_step_kib},
    {"peer_timeout_s", &O::peer_timeout_s},
    {"verify", &O::verify},
};

// C field -> option: set when the C value is not its "unset".
struct ToOption {
  const hoist_load_options& c;
  bool operator()(CString m, std::optional<std::string>* o) const {
    if (c.*m != nullptr) *o = c.*m;
    return true;
  }
  bool operator()(CInt m, std::optional<int>* o) const {
    if (c.*m != HOIST_UNSET) *o = c.*m;
    return true;
  }
  bool operator()(CInt m, std::optional<bool>* o) const {
    if (c.*m != HOIST_UNSET) *o = c.*m != 0;
    return true;
  }
  bool operator()(CDouble m, std::optional<double>* o) const {
    if (c.*m != HOIST_UNSET_DOUBLE) *o = c.*m;
    return true;
  }
  template <typename M, typename T>
  bool operator()(M, T*) const {
    return false;  // a kCFields entry whose type is not the option's
  }
};

// Option (parsed from text) -> C field; a string keeps the caller's pointer.
struct ToC {
  hoist_load_options* c;
  const char* text;
  bool operator()(CString m, std::optional<std::string>*) const {
    c->*m = text;
    return true;
  }
  bool operator()(CInt m, std::optional<int>* o) const {
    c->*m = **o;
    return true;
  }
  bool operator()(CInt m, std::optional<bool>* o) const {
    c->*m = **o ? 1 : 0;
    return true;
  }
  bool operator()(CDouble m, std::optional<double>* o) const {
    c->*m = **o;
    return true;
  }
  template <typename M, typename T>
  bool operator()(M, T*) const {
    return false;
  }
};

hoist::Status WrongType(const char* name) {
  return hoist::Status::Internal(std::string("the C field of option ") + name +
                                 " does not have its type");
}

}  // namespace

namespace hoist::internal {

Status FromC(const hoist_load_options& c, LoadOptions* out) {
  for (const CField& f : kCFields) {
    const config::OptionInfo* info = config::FindOption(f.name);
    if (info == nullptr) return Status::Internal(std::string("C option ") + f.name + " unknown");
    if (!std::visit(ToOption{c}, f.field, info->field(*out))) return WrongType(f.name);
  }
  if (c.topology_file) out->topology_file = c.topology_file;
  out->rank = c.rank;
  out->mpi_comm = c.mpi_comm;
  return Status::Ok();
}

}  // namespace hoist::internal

namespace {

// hoist_load_options_set on a sized struct: only fields its size covers are written.
int SetSized(hoist_load_options* o, const char* key, const char* value) {
  std::vector<std::string> names;
  for (const CField& f : kCFields) {
    names.emplace_back(f.name);
    if (names.back() != key) continue;
    const bool held = std::visit([o](auto m) { return Holds(o->size, m); }, f.field);
    if (!held) {
      return Report(hoist::Status::InvalidArgument(
          "option " + names.back() + " is newer than the caller's hoist_c.h (its " +
          "hoist_load_options has " + std::to_string(o->size) + " bytes)"));
    }
    hoist::JobOptionSet parsed;
    const hoist::config::OptionInfo* info = hoist::config::FindOption(key);
    if (info == nullptr) return Report(hoist::Status::Internal(names.back() + " is no option"));
    hoist::Status s = hoist::config::SetOption(*info, value, names.back(), &parsed);
    if (!s.ok()) return Report(s);
    if (!std::visit(ToC{o, value}, f.field, info->field(parsed))) return Report(WrongType(key));
    return Report(hoist::Status::Ok());
  }
  const std::string near = hoist::Nearest(key, names);
  return Report(
      hoist::Status::InvalidArgument("unknown option '" + hoist::Printable(key) + "'" +
                                     (near.empty() ? "" : " (did you mean '" + near + "'?)")));
}

int LoadWhole(const hoist_load_options& whole, hoist_model** out, bool async = false) {
  hoist::LoadOptions lo;
  if (hoist::Status s = hoist::internal::FromC(whole, &lo); !s.ok()) return Report(s);
  if (whole.allocate != nullptr) {
    if (whole.deallocate == nullptr) {
      return Report(hoist::Status::InvalidArgument("allocate given without deallocate"));
    }
    auto alloc = whole.allocate;
    auto dealloc = whole.deallocate;
    void* user = whole.allocator_user;
    lo.allocator.allocate = [alloc, user](std::uint64_t bytes, int device) {
      return alloc(bytes, device, user);
    };
    lo.allocator.deallocate = [dealloc, user](void* p, std::uint64_t bytes, int device) {
      dealloc(p, bytes, device, user);
    };
  }
  hoist::Result<hoist::Model> m = async ? hoist::LoadAsync(lo) : hoist::Load(lo);
  if (!m.ok()) return Report(m.status());
  *out = new hoist_model{std::move(m).value()};
  return Report(hoist::Status::Ok());
}

// The model's layer group `layer`, checked.
hoist::Status CheckLayer(const hoist_model* m, int layer, bool all_allowed) {
  const int n = static_cast<int>(m->model.layers().size());
  if ((all_allowed && layer == -1) || (layer >= 0 && layer < n)) return hoist::Status::Ok();
  return hoist::Status::InvalidArgument("layer group " + std::to_string(layer) +
                                        " is not among the " + std::to_string(n) + " of the model");
}

}  // namespace

// The names programs built against the header before the size fields call (embed/c_abi_v1.h);
// today's header maps hoist_load_options_init, hoist_model_tensor and hoist_model_find to the
// sized entry points.
#undef hoist_load_options_init
#undef hoist_model_tensor
#undef hoist_model_find

extern "C" {

void hoist_load_options_init(void* options);
int hoist_model_tensor(const hoist_model* model, size_t index, void* out);
int hoist_model_find(const hoist_model* model, const char* name, void* out);

void hoist_load_options_init_sized(hoist_load_options* o, size_t size) {
  if (o == nullptr || size < offsetof(hoist_load_options, version) + sizeof(int)) return;
  const hoist_load_options unset = HOIST_LOAD_OPTIONS_INITIALIZER;
  std::memcpy(o, &unset, std::min(size, sizeof unset));
  o->size = std::min(size, sizeof unset);
}

// v1: a LoadOptionsV1 (no size field), set to its old "unset" values.
void hoist_load_options_init(void* options) {
  if (options == nullptr) return;
  const hoist::internal::LoadOptionsV1 v1 = hoist::internal::InitialV1();
  std::memcpy(options, &v1, sizeof v1);
}

int hoist_load_options_set(hoist_load_options* o, const char* key, const char* value) {
  if (o == nullptr || key == nullptr || value == nullptr) return Null("options, key or value");
  if (hoist::internal::IsSizedOptions(o)) return SetSized(o, key, value);
  // v1: set on today's struct, then written back in the old layout.
  auto* v1 = reinterpret_cast<hoist::internal::LoadOptionsV1*>(o);
  hoist_load_options whole = hoist::internal::FromV1(*v1);
  const int code = SetSized(&whole, key, value);
  if (code == HOIST_OK) *v1 = hoist::internal::ToV1(whole);
  return code;
}

int hoist_load(const hoist_load_options* o, hoist_model** out) {
  if (o == nullptr || out == nullptr) return Null("options or out");
  *out = nullptr;
  if (hoist::internal::IsSizedOptions(o)) return LoadWhole(hoist::internal::WholeOptions(*o), out);
  return LoadWhole(
      hoist::internal::FromV1(*reinterpret_cast<const hoist::internal::LoadOptionsV1*>(o)), out);
}

namespace {

int AttachWith(const char* socket_path, int timeout_ms, bool pending_ok, hoist_model** out) {
  if (socket_path == nullptr || out == nullptr) return Null("socket_path or out");
  *out = nullptr;
  hoist::AttachOptions ao;
  if (timeout_ms > 0) ao.timeout_ms = timeout_ms;
  ao.pending_ok = pending_ok;
  hoist::Result<hoist::Model> m = hoist::Attach(socket_path, ao);
  if (!m.ok()) return Report(m.status());
  *out = new hoist_model{std::move(m).value()};
  return Report(hoist::Status::Ok());
}

}  // namespace

int hoist_attach(const char* socket_path, int timeout_ms, hoist_model** out) {
  return AttachWith(socket_path, timeout_ms, false, out);
}

int hoist_attach_pending(const char* socket_path, int timeout_ms, hoist_model** out) {
  return AttachWith(socket_path, timeout_ms, true, out);
}

size_t hoist_model_tensor_count(const hoist_model* m) {
  return m == nullptr ? 0 : m->model.tensors().size();
}

int hoist_model_tensor_sized(const hoist_model* m, size_t index, hoist_tensor* out, size_t size) {
  if (m == nullptr || out == nullptr) return Null("model or out");
  if (index >= m->model.tensors().size()) {
    return Report(hoist::Status::InvalidArgument("tensor index " + std::to_string(index) + " of " +
                                                 std::to_string(m->model.tensors().size())));
  }
  return Fill(m->model.tensors()[index], out, size);
}

int hoist_model_find_sized(const hoist_model* m, const char* name, hoist_tensor* out, size_t size) {
  if (m == nullptr || name == nullptr || out == nullptr) return Null("model, name or out");
  const hoist::Tensor* t = m->model.Find(name);
  if (t == nullptr) return Report(hoist::Status::NotFound(std::string("no tensor named ") + name));
  return Fill(*t, out, size);
}

// v1: a TensorV1 (no size field).
int hoist_model_tensor(const hoist_model* m, size_t index, void* out) {
  hoist_tensor t = HOIST_TENSOR_INITIALIZER;
  const int code = hoist_model_tensor_sized(m, index, out == nullptr ? nullptr : &t, sizeof t);
  if (code == HOIST_OK) *static_cast<hoist::internal::TensorV1*>(out) = hoist::internal::ToV1(t);
  return code;
}

int hoist_model_find(const hoist_model* m, const char* name, void* out) {
  hoist_tensor t = HOIST_TENSOR_INITIALIZER;
  const int code = hoist_model_find_sized(m, name, out == nullptr ? nullptr : &t, sizeof t);
  if (code == HOIST_OK) *static_cast<hoist::internal::TensorV1*>(out) = hoist::internal::ToV1(t);
  return code;
}

int hoist_model_device(const hoist_model* m, int* is_cuda, int* ordinal) {
  if (m == nullptr) return Null("model");
  if (is_cuda) *is_cuda = m->model.device_type() == hoist::DeviceType::kCuda ? 1 : 0;
  if (ordinal) *ordinal = m->model.device_ordinal();
  return Report(hoist::Status::Ok());
}

int hoist_model_rank(const hoist_model* m, int* rank, int* world) {
  if (m == nullptr) return Null("model");
  if (rank) *rank = m->model.rank();
  if (world) *world = m->model.world();
  return Report(hoist::Status::Ok());
}

int hoist_model_dlpack(const hoist_model* m, size_t index, int raw, DLManagedTensor** out) {
  if (m == nullptr || out == nullptr) return Null("model or out");
  *out = nullptr;
  hoist::Result<DLManagedTensor*> t = hoist::ToDLPack(m->model, index, raw != 0);
  if (!t.ok()) return Report(t.status());
  *out = *t;
  return Report(hoist::Status::Ok());
}

int hoist_model_release(hoist_model* m) {
  if (m == nullptr) return Report(hoist::Status::Ok());
  hoist::Status s = m->model.Release();
  delete m;
  return Report(s);
}

int hoist_load_async(const hoist_load_options* o, hoist_model** out) {
  if (o == nullptr || out == nullptr) return Null("options or out");
  *out = nullptr;
  if (!hoist::internal::IsSizedOptions(o)) {
    return Report(hoist::Status::InvalidArgument(
        "hoist_load_async needs options from HOIST_LOAD_OPTIONS_INITIALIZER (with their size)"));
  }
  return LoadWhole(hoist::internal::WholeOptions(*o), out, /*async=*/true);
}

int hoist_model_wait(hoist_model* m) {
  if (m == nullptr) return Null("model");
  return Report(m->model.Wait());
}

int hoist_model_cancel(hoist_model* m) {
  if (m == nullptr) return Null("model");
  m->model.Cancel();
  return Report(hoist::Status::Ok());
}

int hoist_model_pending(const hoist_model* m, int* pending) {
  if (m == nullptr || pending == nullptr) return Null("model or pending");
  *pending = m->model.pending() ? 1 : 0;
  return Report(hoist::Status::Ok());
}

int hoist_model_progress(const hoist_model* m, uint64_t* bytes_done, uint64_t* bytes_total,
                         int* layers_ready, int* layers) {
  if (m == nullptr) return Null("model");
  const hoist::LoadProgress p = m->model.progress();
  if (bytes_done) *bytes_done = p.bytes_done;
  if (bytes_total) *bytes_total = p.bytes_total;
  if (layers_ready) *layers_ready = p.layers_ready;
  if (layers) *layers = p.layers;
  return Report(hoist::Status::Ok());
}

int hoist_model_layer_name(const hoist_model* m, int layer, const char** name) {
  if (m == nullptr || name == nullptr) return Null("model or name");
  if (hoist::Status s = CheckLayer(m, layer, false); !s.ok()) return Report(s);
  *name = m->model.layers()[static_cast<std::size_t>(layer)].c_str();
  return Report(hoist::Status::Ok());
}

int hoist_model_tensor_layer(const hoist_model* m, size_t index, int* layer) {
  if (m == nullptr || layer == nullptr) return Null("model or layer");
  if (index >= m->model.tensors().size()) {
    return Report(hoist::Status::NotFound("no tensor " + std::to_string(index)));
  }
  *layer = m->model.tensors()[index].layer;
  return Report(hoist::Status::Ok());
}

int hoist_model_layer_ready(const hoist_model* m, int layer, int* ready) {
  if (m == nullptr || ready == nullptr) return Null("model or ready");
  if (hoist::Status s = CheckLayer(m, layer, false); !s.ok()) return Report(s);
  *ready = m->model.LayerReady(layer) ? 1 : 0;
  return Report(hoist::Status::Ok());
}

int hoist_model_wait_layer(const hoist_model* m, int layer) {
  if (m == nullptr) return Null("model");
  return Report(m->model.WaitLayer(layer));
}

int hoist_model_stream_wait(const hoist_model* m, int layer, void* stream) {
  if (m == nullptr) return Null("model");
  if (hoist::Status s = CheckLayer(m, layer, true); !s.ok()) return Report(s);
  return Report(m->model.StreamWait(stream, layer));
}

const char* hoist_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
