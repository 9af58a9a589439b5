// The C API (include/hoist/hoist_c.h) over the C++ one.
#include <string>

#include "hoist/hoist.h"
#include "hoist/hoist_c.h"
#include "hoist/hoist_dlpack.h"

struct hoist_model {
  hoist::Model model;
};

namespace {

thread_local std::string g_last_error;

int Report(const hoist::Status& s) {
  g_last_error = s.ok() ? "" : s.ToString();
  return static_cast<int>(s.code());
}

int Fill(const hoist::Tensor& t, hoist_tensor* out) {
  out->name = t.name.c_str();
  out->dtype = t.dtype.c_str();
  out->ndim = static_cast<int>(t.shape.size());
  out->shape = t.shape.data();
  out->strides = t.strides.data();
  out->data = t.data;
  out->bytes = t.bytes;
  out->arena_offset = t.arena_offset;
  return Report(hoist::Status::Ok());
}

int Null(const char* what) {
  return Report(hoist::Status::InvalidArgument(std::string(what) + " is NULL"));
}

}  // namespace

extern "C" {

void hoist_load_options_init(hoist_load_options* o) {
  if (o == nullptr) return;
  *o = hoist_load_options{};
  o->ep = -1;
}

int hoist_load(const hoist_load_options* o, hoist_model** out) {
  if (o == nullptr || out == nullptr) return Null("options or out");
  *out = nullptr;
  hoist::LoadOptions lo;
  if (o->topology_file) lo.topology_file = o->topology_file;
  if (o->model) lo.model = o->model;
  if (o->tp > 0) lo.tp = o->tp;
  if (o->dp > 0) lo.dp = o->dp;
  if (o->ep >= 0) lo.ep = o->ep;
  if (o->layout) lo.layout = o->layout;
  if (o->placement) lo.placement = o->placement;
  if (o->device) lo.device = o->device;
  if (o->read) lo.read = o->read;
  if (o->threads > 0) lo.threads = o->threads;
  lo.verify = o->verify != 0;
  lo.rank = o->rank;
  lo.mpi_comm = o->mpi_comm;
  if (o->allocate != nullptr) {
    if (o->deallocate == nullptr) {
      return Report(hoist::Status::InvalidArgument("allocate given without deallocate"));
    }
    auto alloc = o->allocate;
    auto dealloc = o->deallocate;
    void* user = o->allocator_user;
    lo.allocator.allocate = [alloc, user](std::uint64_t bytes, int device) {
      return alloc(bytes, device, user);
    };
    lo.allocator.deallocate = [dealloc, user](void* p, std::uint64_t bytes, int device) {
      dealloc(p, bytes, device, user);
    };
  }
  hoist::Result<hoist::Model> m = hoist::Load(lo);
  if (!m.ok()) return Report(m.status());
  *out = new hoist_model{std::move(m).value()};
  return Report(hoist::Status::Ok());
}

int hoist_attach(const char* socket_path, int timeout_ms, hoist_model** out) {
  if (socket_path == nullptr || out == nullptr) return Null("socket_path or out");
  *out = nullptr;
  hoist::AttachOptions ao;
  if (timeout_ms > 0) ao.timeout_ms = timeout_ms;
  hoist::Result<hoist::Model> m = hoist::Attach(socket_path, ao);
  if (!m.ok()) return Report(m.status());
  *out = new hoist_model{std::move(m).value()};
  return Report(hoist::Status::Ok());
}

size_t hoist_model_tensor_count(const hoist_model* m) {
  return m == nullptr ? 0 : m->model.tensors().size();
}

int hoist_model_tensor(const hoist_model* m, size_t index, hoist_tensor* out) {
  if (m == nullptr || out == nullptr) return Null("model or out");
  if (index >= m->model.tensors().size()) {
    return Report(hoist::Status::InvalidArgument("tensor index " + std::to_string(index) + " of " +
                                                 std::to_string(m->model.tensors().size())));
  }
  return Fill(m->model.tensors()[index], out);
}

int hoist_model_find(const hoist_model* m, const char* name, hoist_tensor* out) {
  if (m == nullptr || name == nullptr || out == nullptr) return Null("model, name or out");
  const hoist::Tensor* t = m->model.Find(name);
  if (t == nullptr) return Report(hoist::Status::NotFound(std::string("no tensor named ") + name));
  return Fill(*t, out);
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

const char* hoist_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
