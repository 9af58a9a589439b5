// Default (Unsupported) implementations of the Device seam's sharing calls (device.h), and the
// PCI-bus-id lookup for builds without CUDA.
#include "transport/devices/device.h"

namespace hoist::transport {

Result<ArenaHandle> Device::ExportArena(const DeviceBuffer&) {
  return Status::Unsupported(Name() + ": exporting an arena to another process");
}

Result<DeviceBuffer> Device::ImportArena(const ArenaHandle&) {
  return Status::Unsupported(Name() + ": importing an arena from another process");
}

Status Device::CloseImported(DeviceBuffer&) {
  return Status::Unsupported(Name() + ": closing an imported arena");
}

Status Device::AdoptArena(const DeviceBuffer&) {
  return Status::Unsupported(Name() + ": adopting caller-allocated arena memory");
}

Status Device::StreamWait(StreamId, EventId) {
  return Status::Unsupported(Name() + ": a stream waiting for an event");
}

Status Device::CopyBatchAsync(std::span<const Copy2D> ops, StreamId stream) {
  for (const Copy2D& op : ops) HOIST_RETURN_IF_ERROR(CopyAsync(op, stream));
  return Status::Ok();
}

Status Device::TransposeInPlace(const Transpose&) {
  return Status::Unsupported(Name() +
                             ": transposing tensors in place (the fused layout's "
                             "transposed experts; --layout hf loads them as stored)");
}

Result<DecoderId> Device::CreateDecoder(const DecodeSet&) {
  return Status::Unsupported(Name() + ": decoding packed (codec) blocks");
}

Status Device::DecodeAsync(DecoderId, std::size_t, std::size_t, const void*, void*, StreamId) {
  return Status::Unsupported(Name() + ": decoding packed (codec) blocks");
}

Status Device::DecoderStatus(DecoderId) {
  return Status::Unsupported(Name() + ": decoding packed (codec) blocks");
}

Status Device::DestroyDecoder(DecoderId) {
  return Status::Unsupported(Name() + ": decoding packed (codec) blocks");
}

std::vector<Device::DecoderStep> Device::DecoderSteps(DecoderId) { return {}; }

#ifndef HOIST_HAVE_CUDA
Result<int> CudaOrdinalByPciBusId(const std::string& pci_bus_id) {
  return Status::Unsupported("cuda device " + pci_bus_id +
                             ": this build of hoist has no CUDA backend (toolkit not found)");
}
#endif

}  // namespace hoist::transport
