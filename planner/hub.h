// Hugging Face Hub repo ids as model paths, resolved offline in the local hub cache: hoist never
// downloads. `--model Qwen/Qwen3-4B` (or `Qwen/Qwen3-4B@REVISION`: a branch, tag or commit hash;
// default `main`) becomes <cache>/models--Qwen--Qwen3-4B/snapshots/<hash>, where <hash> is the
// content of <cache>/models--Qwen--Qwen3-4B/refs/<revision> (a 40-hex revision names the snapshot
// directly). That is the layout huggingface_hub writes: snapshot files are symlinks into
// ../../blobs/, which the checkpoint reader accepts inside the repository folder.
//
// Caches searched, in order (first hit wins, duplicates skipped): $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE (the older name), $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// $HOME/.cache/huggingface/hub.
//
// An existing folder always wins over a repo id of the same spelling; a string that cannot be a
// repo id (an absolute or dotted path, ...) is returned unchanged, so that the checkpoint reader
// reports a missing folder as before. Failure: a repo id found in no cache is InvalidArgument
// naming every place looked at and why each did not do. Threading: pure apart from reading the file
// system; the environment is passed in (HubEnv::FromProcess reads it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"

namespace hoist::planner {

struct HubEnv {
  std::string hf_hub_cache;           // $HF_HUB_CACHE
  std::string huggingface_hub_cache;  // $HUGGINGFACE_HUB_CACHE
  std::string hf_home;                // $HF_HOME
  std::string xdg_cache_home;         // $XDG_CACHE_HOME
  std::string home;                   // $HOME
  static HubEnv FromProcess();
};

// The cache folders searched, in order, without duplicates.
std::vector<std::string> HubCacheDirs(const HubEnv& env);

struct RepoRef {
  std::string repo_id;   // "Qwen/Qwen3-4B"
  std::string revision;  // "main" when not given
};

// "owner/name" or "owner/name@revision"; nullopt when `model` cannot be a repo id (absolute or
// dotted paths, more than one '/', characters the Hub does not allow, an empty revision).
std::optional<RepoRef> ParseRepoId(std::string_view model);

// `model` unchanged when it exists on disk or cannot be a repo id; the snapshot folder when it is
// a repo id in a cache; InvalidArgument for a repo id in no cache (naming every place looked).
Result<std::string> ResolveModelPath(const std::string& model, const HubEnv& env);

}  // namespace hoist::planner
