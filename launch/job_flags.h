// The CLI11 flags of a job: they fill a config::JobSpec (config/job_spec.h), which
// config::ResolveJobSpec then checks and resolves, the same way for the embedding API. Only the
// command line (launch/) links CLI11; libhoist.so never does.
//
// Failure: none here (CLI11 reports a malformed flag as a parse error, which launch/cli.cc maps
// to exit 2). Threading: call while building the command line, before parsing.
#pragma once

#include <CLI/CLI.hpp>

#include "config/job_spec.h"

namespace hoist::launch {

// Registers the flags that fill `spec` on a subcommand: the plan selection (--topology, --model,
// --tp, --ep, --dp, --layout, --placement, --dedup, --dedup-step-kib, --unexpected-tensors) and,
// with `load_flags`, how a rank loads (--rank, --read, --device, --staging, --slots, --slot-mib,
// --threads, --chunk-kib, --verify, --peer-timeout-s, --no-numa). `hoist plan`, `hoist load` and
// `hoist serve` share them. The flags only parse;
// config::ResolveJobSpec checks the values.
void AddJobFlags(CLI::App* app, config::JobSpec* spec, bool load_flags);

// The --log-level values (spdlog's names), as a CLI11 check.
CLI::Validator LogLevels();

}  // namespace hoist::launch
