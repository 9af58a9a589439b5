// DLPack export (include/hoist/hoist_dlpack.h).
#include <string>

#include "embed/model_state.h"
#include "hoist/hoist_dlpack.h"

namespace hoist {
namespace {

struct Exported {
  std::shared_ptr<internal::ModelState> keep;  // the weights live while the consumer holds this
  std::vector<std::int64_t> shape, strides;
};

void Delete(DLManagedTensor* self) {
  delete static_cast<Exported*>(self->manager_ctx);
  delete self;
}

}  // namespace

bool DLPackDType(std::string_view dtype, bool raw, DLDataType* out) {
  const int size = DTypeSize(dtype);
  if (size == 0) return false;
  out->lanes = 1;
  out->bits = static_cast<std::uint8_t>(size * 8);
  if (raw || dtype == "F8_E4M3" || dtype == "F8_E5M2" || dtype == "F8_E8M0" || dtype == "BOOL" ||
      dtype[0] == 'U') {
    out->code = kDLUInt;
  } else if (dtype == "BF16") {
    out->code = kDLBfloat;
  } else if (dtype[0] == 'F') {
    out->code = kDLFloat;
  } else if (dtype[0] == 'I') {
    out->code = kDLInt;
  } else {
    return false;
  }
  return true;
}

Result<DLManagedTensor*> ToDLPack(const Model& model, std::size_t index, bool raw) {
  const std::shared_ptr<internal::ModelState>& state = model.state();
  if (!state) return Status::InvalidArgument("DLPack export of a released model");
  if (index >= state->tensors.size()) {
    return Status::InvalidArgument("DLPack export: tensor index " + std::to_string(index) + " of " +
                                   std::to_string(state->tensors.size()));
  }
  const Tensor& t = state->tensors[index];
  DLDataType dtype;
  if (!DLPackDType(t.dtype, raw, &dtype)) {
    return Status::Unsupported("DLPack export: tensor " + t.name + " has dtype " + t.dtype +
                               " with no DLPack type");
  }
  auto ctx = std::make_unique<Exported>();
  ctx->keep = state;
  ctx->shape = t.shape;
  ctx->strides = t.strides;
  auto* m = new DLManagedTensor{};
  m->dl_tensor.data = t.data;
  m->dl_tensor.device.device_type = state->type == DeviceType::kCuda ? kDLCUDA : kDLCPU;
  m->dl_tensor.device.device_id = state->type == DeviceType::kCuda ? state->ordinal : 0;
  m->dl_tensor.ndim = static_cast<int>(ctx->shape.size());
  m->dl_tensor.dtype = dtype;
  m->dl_tensor.shape = ctx->shape.data();
  m->dl_tensor.strides = ctx->strides.data();
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx.release();
  m->deleter = Delete;
  return m;
}

Result<DLManagedTensor*> ToDLPack(const Model& model, std::string_view name, bool raw) {
  const std::vector<Tensor>& ts = model.tensors();
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].name == name) return ToDLPack(model, i, raw);
  }
  return Status::NotFound("DLPack export: no tensor named " + std::string(name));
}

}  // namespace hoist
