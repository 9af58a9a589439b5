// hoist's command line: `hoist plan`, `hoist load` (and `serve`, `ctl`: launch/serve_cli.h;
// `pack`: launch/pack_cli.h).
// The only place that turns a Status into an exit code (0 ok, 1 a load or plan failure, 2 a usage
// or configuration error).
// Threading: runs on the main thread.
#pragma once

namespace hoist::launch {

int Main(int argc, char** argv);

}  // namespace hoist::launch
