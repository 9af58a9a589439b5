#include "launch/pack_cli.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "launch/exit_codes.h"
#include "util/printable.h"

namespace hoist::launch {

namespace {

double Percent(double part, std::uint64_t whole) {
  return 100.0 * part / static_cast<double>(std::max<std::uint64_t>(1, whole));
}

// One line per dtype, then the tensors furthest above their bound: packed size and the entropy
// bound of the codec's split (docs/CODEC.md, "How close to the bound"), as % of the original.
void PrintSizes(const tools::PackSummary& s) {
  for (const tools::PackSizes& d : s.by_dtype) {
    const double packed = Percent(static_cast<double>(d.packed_bytes), d.original_bytes);
    const double bound = Percent(d.bound_bytes, d.original_bytes);
    std::printf(
        "hoist pack:   %s: %llu tensors (%llu coded), %llu bytes -> %llu (%.2f%%), "
        "entropy bound %.2f%% (+%.2f points)\n",
        Printable(d.name).c_str(), static_cast<unsigned long long>(d.tensors),
        static_cast<unsigned long long>(d.coded), static_cast<unsigned long long>(d.original_bytes),
        static_cast<unsigned long long>(d.packed_bytes), packed, bound, packed - bound);
  }
  for (const tools::PackSizes& t : s.furthest) {
    std::printf(
        "hoist pack:   furthest above the bound: %s (%s, %llu bytes): %.2f%%, bound %.2f%% "
        "(+%.0f bytes)\n",
        Printable(t.name).c_str(), Printable(t.dtype).c_str(),
        static_cast<unsigned long long>(t.original_bytes),
        Percent(static_cast<double>(t.packed_bytes), t.original_bytes),
        Percent(t.bound_bytes, t.original_bytes),
        static_cast<double>(t.packed_bytes) - t.bound_bytes);
  }
}

}  // namespace

PackCommand::PackCommand(CLI::App* app) {
  pack_ = app->add_subcommand("pack", "write a losslessly compressed copy of a checkpoint");
  pack_->add_option("--model", options_.model_dir, "checkpoint folder (*.safetensors)")->required();
  pack_->add_option("--out", options_.out_dir, "output folder (created if missing)")->required();
  pack_->add_option("--tp-multiple", options_.tp_multiple,
                    "row blocks and column stripes serve every tp dividing N (1 to 1024, "
                    "default 8; 1: no stripes)");
  pack_->add_option("--shard-gib", shard_gib_,
                    "GiB per packed shard (above 0, below 1024; "
                    "default 4)");
  pack_->add_option("--threads", options_.threads,
                    "encoder threads (0 to 1024; default 0: all "
                    "cores)");
}

int PackCommand::Run() {
  if (!(shard_gib_ > 0 && shard_gib_ < 1024)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", shard_gib_);
    return Fail(Status::InvalidArgument("--shard-gib " + std::string(value) +
                                        " is out of range: above 0, below 1024"));
  }
  tools::PackOptions o = options_;
  o.shard_bytes = static_cast<std::uint64_t>(shard_gib_ * static_cast<double>(1ull << 30));
  const auto t0 = std::chrono::steady_clock::now();
  Result<tools::PackSummary> summary = tools::PackCheckpoint(o);
  if (!summary.ok()) return Fail(summary.status());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!summary->note.empty()) {
    std::printf("hoist pack: %s\n", Printable(summary->note).c_str());
  }
  const auto pct = [&](std::uint64_t n) {
    return Percent(static_cast<double>(n), summary->original_bytes);
  };
  std::printf(
      "hoist pack: %llu tensors (%llu in column stripes), %llu bytes coded to %llu (%.1f%%), "
      "%llu on disk (%.1f%%, streams aligned to 4 KiB) in %.2f s: %s\n",
      static_cast<unsigned long long>(summary->tensors),
      static_cast<unsigned long long>(summary->striped),
      static_cast<unsigned long long>(summary->original_bytes),
      static_cast<unsigned long long>(summary->coded_bytes()), pct(summary->coded_bytes()),
      static_cast<unsigned long long>(summary->packed_bytes), pct(summary->packed_bytes), secs,
      Printable(o.out_dir).c_str());
  PrintSizes(*summary);
  return kExitOk;
}

}  // namespace hoist::launch
