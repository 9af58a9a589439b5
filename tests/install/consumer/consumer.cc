// Loads a checkpoint through an installed libhoist (host memory, --verify's check) and prints
// the final norm's first values, which the install test compares with the checkpoint's own bytes.
// Usage: consumer MODEL_DIR
#include <cstdio>
#include <cstring>

#include "hoist/hoist.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer MODEL_DIR\n");
    return 2;
  }
  hoist::LoadOptions o;
  o.model = argv[1];
  o.device = "host";
  o.verify = true;
  hoist::Result<hoist::Model> m = hoist::Load(o);
  if (!m.ok()) {
    std::fprintf(stderr, "consumer: %s\n", m.status().ToString().c_str());
    return 1;
  }
  const hoist::Tensor* norm = m->Find("model.norm.weight");
  if (norm == nullptr || norm->bytes < 8) {
    std::fprintf(stderr, "consumer: no model.norm.weight\n");
    return 1;
  }
  std::printf("tensors %zu norm %s [%lld] first bytes", m->tensors().size(), norm->dtype.c_str(),
              static_cast<long long>(norm->shape[0]));
  const auto* bytes = static_cast<const unsigned char*>(norm->data);
  for (int i = 0; i < 8; ++i) std::printf(" %02x", bytes[i]);
  std::printf("\n");
  return 0;
}
