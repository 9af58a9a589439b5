// hoist-mkckpt: the fixture generator's command line (see tools/mkckpt.h).
//
//   hoist-mkckpt [--family FAMILY] --preset NAME|--config FILE
//                --out DIR [--shard-size BYTES] [--seed S] [--threads T] [--header-only]
//   (FAMILY: a planner family with '-' for '_', e.g. qwen3, qwen3-moe, deepseek-v3, mixtral,
//   gpt-oss, qwen3-5-moe, or mistral; see tools/mkckpt.h)
//   hoist-mkckpt --config FILE --tensors FILE --out DIR  (exactly the listed tensors)
//   hoist-mkckpt --list-presets      (name, family, tensor count, bytes and size of each preset)
//
// Exit codes: 0 written (or --help / --version), 1 failed (message on stderr), 2 bad command
// line.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "tools/mkckpt.h"
#include "util/units.h"

int main(int argc, char** argv) {
  hoist::tools::MkckptOptions o;
  bool list = false;
  CLI::App app{"hoist-mkckpt: write a deterministic HuggingFace-layout safetensors checkpoint"};
  app.add_option("--family", o.family,
                 "the model family, checked against the preset or config (llama, mistral, qwen2, "
                 "qwen3, qwen3-moe, qwen2-moe, qwen3-next, qwen3-5, qwen3-5-moe, mixtral, "
                 "minimax-m2, glm4-moe, glm-moe-dsa, deepseek-v2, deepseek-v3, gemma3-text, phi3, "
                 "gpt-oss)");
  auto* preset = app.add_option("--preset", o.preset, "a built-in model shape (--list-presets)");
  auto* config = app.add_option("--config", o.config_path, "a config.json of a supported family");
  preset->excludes(config);
  app.add_option("--tensors", o.tensors_path,
                 "with --config: a JSON list {name: [dtype, shape]} of the tensors to write "
                 "(tests/data/hf), any architecture")
      ->needs(config);
  app.add_option("--out", o.out_dir, "output folder (created if missing)");
  app.add_option("--shard-size", o.shard_size, "bytes per shard (default 5000000000)");
  app.add_option("--seed", o.seed, "content seed (default 0)");
  app.add_option("--threads", o.threads, "writer threads (default: all cores)");
  app.add_flag("--header-only", o.header_only,
               "write config, index and shard headers only; tensor data stays a sparse hole");
  app.add_flag("--list-presets", list, "print each preset (family, tensors, size) and exit");
  app.set_version_flag("--version", std::string("hoist-mkckpt ") + HOIST_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // a usage error: one line, exit 2 (as hoist)
    std::fprintf(stderr, "hoist-mkckpt: error: %s\nRun 'hoist-mkckpt --help' for the usage.\n",
                 e.what());
    return 2;
  }

  if (list) {
    std::printf("%-20s %-12s %8s %16s %12s\n", "preset", "family", "tensors", "bytes", "size");
    for (const auto& name : hoist::tools::PresetNames()) {
      auto family = hoist::tools::PresetFamily(name);
      auto config = hoist::tools::PresetConfigJson(name);
      auto specs = config.ok()
                       ? hoist::tools::ListTensorSpecs(*config)
                       : hoist::Result<std::vector<hoist::tools::TensorSpec>>(config.status());
      if (!family.ok() || !specs.ok()) {
        std::fprintf(stderr, "hoist-mkckpt: preset %s: %s\n", name.c_str(),
                     (family.ok() ? specs.status() : family.status()).ToString().c_str());
        return 1;
      }
      std::uint64_t bytes = 0;
      for (const auto& t : *specs) bytes += t.Bytes();
      std::printf("%-20s %-12s %8zu %16llu %12s\n", name.c_str(), family->c_str(), specs->size(),
                  static_cast<unsigned long long>(bytes), hoist::HumanBytes(bytes).c_str());
    }
    return 0;
  }
  if (o.out_dir.empty() || (o.preset.empty() && o.config_path.empty())) {
    std::fprintf(stderr, "hoist-mkckpt: --out and one of --preset/--config are required\n%s",
                 app.help().c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  hoist::Status s = hoist::tools::MakeCheckpoint(o);
  if (!s.ok()) {
    std::fprintf(stderr, "hoist-mkckpt: %s\n", s.ToString().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hoist-mkckpt: wrote %s in %.2f s\n", o.out_dir.c_str(), secs);
  return 0;
}
