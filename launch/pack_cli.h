// `hoist pack --model DIR --out DIR2 [--tp-multiple N] [--shard-gib G] [--threads T]`: writes a
// packed (losslessly compressed) copy of a checkpoint (codec/pack/pack.h, docs/PACKED.md).
// launch/cli.cc registers it and hands over when it was chosen.
//
// Exit codes as the rest of the CLI (launch/exit_codes.h): 0 written (one summary line on
// stdout, and a line saying why nothing is column-striped when the model has no family rules),
// 1 a failure (a bad safetensors file, I/O), 2 a usage error (no such model folder, no
// safetensors in it, --out equal to --model, a number out of range).
// Threading: main thread (the encoder runs its own threads and joins them).
#pragma once

#include <CLI/CLI.hpp>

#include "codec/pack/pack.h"

namespace hoist::launch {

class PackCommand {
 public:
  // Adds the `pack` subcommand to `app`.
  explicit PackCommand(CLI::App* app);
  // True when the parsed command line chose `pack`.
  bool Selected() const { return pack_->parsed(); }
  int Run();

 private:
  CLI::App* pack_ = nullptr;
  tools::PackOptions options_;
  double shard_gib_ = 4;
};

}  // namespace hoist::launch
