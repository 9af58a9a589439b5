#include "launch/job_flags.h"

#include <optional>
#include <string>

#include "planner/plan_options.h"

namespace hoist::launch {
namespace {

// A flag that sets an optional only when given.
template <typename T>
CLI::Option* AddOptional(CLI::App* app, const std::string& name, std::optional<T>* out,
                         const std::string& help) {
  return app->add_option_function<T>(
      name, [out](const T& v) { *out = v; }, help);
}

std::string Range(long long lo, long long hi) {
  return " (" + std::to_string(lo) + " to " + std::to_string(hi) + ")";
}

}  // namespace

void AddJobFlags(CLI::App* app, config::JobSpec* s, bool load_flags) {
  const config::JobLimits& k = config::kLimits;
  app->add_option("--topology", s->topology, "YAML topology file (flags override it)");
  AddOptional(app, "--model", &s->model,
              "checkpoint folder, or a Hugging Face repo id owner/name[@revision] in the local "
              "cache (never downloaded)");
  const long long world = planner::kMaxWorld;
  AddOptional(app, "--tp", &s->tp, "tensor-parallel size" + Range(1, world));
  AddOptional(app, "--ep", &s->ep, "expert-parallel size (= world; 0: off)" + Range(0, world));
  AddOptional(app, "--dp", &s->dp, "data-parallel groups (without --ep)" + Range(1, world));
  AddOptional(app, "--layout", &s->layout, "fused | hf");
  AddOptional(app, "--placement", &s->placement, "expert placement under ep: linear | round_robin");
  AddOptional(app, "--dedup", &s->dedup,
              "auto | none | node | job: read bytes several ranks need once per node (or job) "
              "and forward them (auto: node where it pays)");
  AddOptional(app, "--dedup-step-kib", &s->dedup_step_kib,
              "dedup: KiB of shared bytes per exchange step (0: 64 MiB)" +
                  Range(planner::kMinDedupStepBytes >> 10, planner::kMaxDedupStepBytes >> 10));
  AddOptional(app, "--unexpected-tensors", &s->unexpected_tensors,
              "error | warn | ignore: checkpoint tensors no family rule knows (default warn)");
  if (!load_flags) return;
  app->add_option("--rank", s->solo_rank, "without mpirun: which rank of the plan to run");
  AddOptional(app, "--read", &s->read, "auto | buffered | direct | mmap | pageable | registered");
  AddOptional(app, "--device", &s->device, "auto | cuda | host");
  AddOptional(app, "--staging", &s->staging,
              "how staging is pinned: auto | register (touch + cudaHostRegister) | mallochost");
  AddOptional(app, "--slots", &s->slots,
              "pinned staging slots (0: default)" + Range(0, k.max_slots));
  AddOptional(app, "--slot-mib", &s->slot_mib,
              "MiB per staging slot (0: default)" + Range(0, k.max_slot_mib));
  AddOptional(app, "--threads", &s->threads, "fill threads (0: default)" + Range(0, k.max_threads));
  AddOptional(app, "--chunk-kib", &s->chunk_kib,
              "KiB per fill task (0: slot size / threads)" + Range(0, k.max_chunk_kib));
  app->add_flag_function(
      "--verify", [s](std::int64_t) { s->verify = true; },
      "prove every device byte equals the plan's");
  AddOptional(app, "--cpu-bind", &s->cpu_bind,
              "where fill threads run: auto (the GPU's NUMA cores, shared among the node's "
              "ranks) | launcher (as mpirun bound them) | none")
      ->check(CLI::IsMember({"auto", "launcher", "none"}));
  AddOptional(app, "--peer-timeout-s", &s->peer_timeout_s,
              "seconds any wait for another rank may take before the job fails naming it (above 0, "
              "at most " +
                  std::to_string(static_cast<int>(k.max_peer_timeout_s)) + ")");
  app->add_flag("--no-numa", s->no_numa, "do not bind to the GPU's NUMA node");
}

CLI::Validator LogLevels() {
  return CLI::IsMember(
      {"trace", "debug", "info", "warn", "warning", "error", "err", "critical", "off"});
}

}  // namespace hoist::launch
