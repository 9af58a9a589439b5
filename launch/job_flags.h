// The CLI11 flags of a job: one `--name` per option of config/option_table.h's table (kOptions; '_'
// written '-'; a bool is `--name` / `--no-name`), filling a config::JobSpec (config/job_spec.h),
// which config::ResolveJobSpec then checks and resolves, the same way for the embedding API.
// Only the command line (launch/) links CLI11; libhoist.so never does.
//
// Deprecated flags (config::kDeprecatedFlags, e.g. `--staging KIND` for `--pinning KIND`) still
// parse, hidden from --help; each use adds its warning to JobSpec::warnings, which ResolveJob
// prints.
//
// Failure: none here (CLI11 reports a malformed flag as a parse error, which launch/cli.cc maps
// to exit 2). Threading: call while building the command line, before parsing.
#pragma once

#include <CLI/CLI.hpp>

#include "config/job_spec.h"

namespace hoist::launch {

// Registers the flags that fill `spec` on a subcommand: --topology and the options that shape
// the plan (kOptions' `plan` entries) and, with `load_flags`, --rank and every other option (how
// a rank loads). `hoist plan`, `hoist load` and `hoist serve` share them. The flags only parse;
// config::ResolveJobSpec checks the values.
void AddJobFlags(CLI::App* app, config::JobSpec* spec, bool load_flags);

// config::ResolveJobSpec, then its warnings (deprecated spellings) as "hoist: warning:" lines on
// stderr, printed once under a launcher (rank 0).
Result<config::ResolvedJob> ResolveJob(const config::JobSpec& spec);

// The --log-level values (spdlog's names), as a CLI11 check.
CLI::Validator LogLevels();

}  // namespace hoist::launch
