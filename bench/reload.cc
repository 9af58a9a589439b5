// Repeated loads in one process through the embedding API (hoist::Load), as an engine that
// reloads its weights would do them: the first load sets up the staging ring, later ones reuse
// it (transport/devices/staging_pool.h). Prints one JSON line per load with its phases (ms).
// Usage: hoist-bench-reload MODEL_DIR [loads=6] [tp=1] [rank=0]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hoist/hoist.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hoist-bench-reload MODEL_DIR [loads=6] [tp=1] [rank=0]\n");
    return 2;
  }
  const int loads = argc > 2 ? std::atoi(argv[2]) : 6;
  hoist::LoadOptions o;
  o.model = argv[1];
  o.tp = argc > 3 ? std::atoi(argv[3]) : 1;
  o.rank = argc > 4 ? std::atoi(argv[4]) : 0;
  for (int i = 0; i < loads; ++i) {
    hoist::Result<hoist::Model> m = hoist::Load(o);
    if (!m.ok()) {
      std::fprintf(stderr, "load %d: %s\n", i, m.status().ToString().c_str());
      return 1;
    }
    std::string phases;
    std::uint64_t bytes = 0;
    for (const hoist::Phase& p : m->phases()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s\"%s\": %.3f", phases.empty() ? "" : ", ", p.name.c_str(),
                    p.seconds * 1e3);
      phases += buf;
      if (p.name == "h2d") bytes = p.bytes;
    }
    std::printf(
        "{\"kind\": \"reload\", \"load\": %d, \"tp\": %d, \"rank\": %d, \"bytes\": %llu, "
        "\"phases_ms\": {%s}}\n",
        i, *o.tp, o.rank, static_cast<unsigned long long>(bytes), phases.c_str());
    std::fflush(stdout);
    hoist::Status s = m->Release();
    if (!s.ok()) {
      std::fprintf(stderr, "release %d: %s\n", i, s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
