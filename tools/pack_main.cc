// hoist-pack: writes a packed (losslessly compressed) copy of a checkpoint (tools/pack.h,
// docs/PACKED.md).
//
//   hoist-pack --model DIR --out DIR2 [--tp-multiple N] [--shard-gib G] [--threads T]
//
// Exit codes: 0 written, 1 failed (message on stderr), 2 bad command line or options.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "tools/pack.h"

int main(int argc, char** argv) {
  hoist::tools::PackOptions o;
  double shard_gib = 4;
  CLI::App app{"hoist-pack: write a losslessly compressed copy of a safetensors checkpoint"};
  app.add_option("--model", o.model_dir, "checkpoint folder (*.safetensors)")->required();
  app.add_option("--out", o.out_dir, "output folder (created if missing)")->required();
  app.add_option("--tp-multiple", o.tp_multiple,
                 "row blocks tile the row slices of every tp dividing N (default 8)");
  app.add_option("--shard-gib", shard_gib, "GiB per packed shard (default 4)");
  app.add_option("--threads", o.threads, "encoder threads (default: all cores)");
  CLI11_PARSE(app, argc, argv);
  if (!(shard_gib > 0 && shard_gib < 1024)) {
    std::fprintf(stderr, "hoist-pack: --shard-gib must be in (0, 1024)\n");
    return 2;
  }
  o.shard_bytes = static_cast<std::uint64_t>(shard_gib * (1ull << 30));
  const auto t0 = std::chrono::steady_clock::now();
  auto summary = hoist::tools::PackCheckpoint(o);
  if (!summary.ok()) {
    std::fprintf(stderr, "hoist-pack: %s\n", summary.status().ToString().c_str());
    return summary.status().code() == hoist::Code::kInvalidArgument ? 2 : 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hoist-pack: %llu tensors, %llu bytes -> %llu (%.1f%%) in %.2f s: %s\n",
              static_cast<unsigned long long>(summary->tensors),
              static_cast<unsigned long long>(summary->original_bytes),
              static_cast<unsigned long long>(summary->packed_bytes),
              100.0 * static_cast<double>(summary->packed_bytes) /
                  static_cast<double>(std::max<std::uint64_t>(1, summary->original_bytes)),
              secs, o.out_dir.c_str());
  return 0;
}
