#include "planner/hub.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "planner/regular_file.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

// One half of "owner/name", by the Hub's rules: [A-Za-z0-9_.-]{1,96}, no "--" or "..", not
// starting or ending with '-' or '.'.
bool ValidRepoPart(std::string_view s) {
  if (s.empty() || s.size() > 96) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  auto edge = [](char c) { return c == '-' || c == '.'; };
  if (edge(s.front()) || edge(s.back())) return false;
  return s.find("--") == std::string_view::npos && s.find("..") == std::string_view::npos;
}

// A branch, tag or commit: [A-Za-z0-9_.-/], no "..", not starting or ending with '/'.
bool ValidRevision(std::string_view s) {
  if (s.empty() || s.size() > 256 || s.front() == '/' || s.back() == '/') return false;
  for (char c : s) {
    if (!IsNameChar(c) && c != '/') return false;
  }
  return s.find("..") == std::string_view::npos && s.find("//") == std::string_view::npos;
}

bool IsCommitHash(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The first line of a small regular file (planner/regular_file.h: a FIFO never blocks);
// nullopt when `path` is not a readable regular file.
std::optional<std::string> FirstLine(const std::string& path) {
  Result<RegularFile> file = RegularFile::Open(path, /*metadata=*/false);
  if (!file.ok()) return std::nullopt;
  char buf[256];
  const ssize_t n = ::pread(file->fd(), buf, sizeof(buf), 0);
  if (n < 0) return std::nullopt;
  const std::string_view text(buf, static_cast<std::size_t>(n));
  return std::string(text.substr(0, text.find('\n')));
}

// The snapshot folder of `ref` in the cache `dir`, or nullopt with why not in `why`.
std::optional<std::string> FindInCache(const std::string& dir, const RepoRef& ref,
                                       std::string* why) {
  std::string folder = "models--" + ref.repo_id;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(dir) / folder;
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) {
    *why = repo.string() + " (not there)";
    return std::nullopt;
  }
  const fs::path ref_file = repo / "refs" / ref.revision;
  std::string hash;
  if (std::optional<std::string> line = FirstLine(ref_file.string())) {
    hash = *line;
    while (!hash.empty() && (hash.back() == '\r' || hash.back() == ' ')) hash.pop_back();
    if (hash.empty() || !ValidRevision(hash) || hash.find('/') != std::string::npos) {
      *why = ref_file.string() + " (does not hold a commit hash)";
      return std::nullopt;
    }
  } else if (IsCommitHash(ref.revision)) {
    hash = ref.revision;
  } else {
    *why = ref_file.string() + " (no such ref: revision '" + ref.revision + "' was never fetched)";
    return std::nullopt;
  }
  const fs::path snapshot = repo / "snapshots" / hash;
  if (!fs::is_directory(snapshot, ec)) {
    *why = snapshot.string() + " (missing; revision '" + ref.revision + "' -> " + hash + ")";
    return std::nullopt;
  }
  return snapshot.string();
}

}  // namespace

HubEnv HubEnv::FromProcess() {
  HubEnv e;
  e.hf_hub_cache = Env("HF_HUB_CACHE");
  e.huggingface_hub_cache = Env("HUGGINGFACE_HUB_CACHE");
  e.hf_home = Env("HF_HOME");
  e.xdg_cache_home = Env("XDG_CACHE_HOME");
  e.home = Env("HOME");
  return e;
}

std::vector<std::string> HubCacheDirs(const HubEnv& env) {
  std::vector<std::string> candidates;
  if (!env.hf_hub_cache.empty()) candidates.push_back(env.hf_hub_cache);
  if (!env.huggingface_hub_cache.empty()) candidates.push_back(env.huggingface_hub_cache);
  if (!env.hf_home.empty()) candidates.push_back(env.hf_home + "/hub");
  if (!env.xdg_cache_home.empty()) candidates.push_back(env.xdg_cache_home + "/huggingface/hub");
  if (!env.home.empty()) candidates.push_back(env.home + "/.cache/huggingface/hub");
  auto key = [](const std::string& dir) {  // "/a/./b/" and "/a/b" are one folder
    std::string k = fs::path(dir).lexically_normal().string();
    while (k.size() > 1 && k.back() == '/') k.pop_back();
    return k;
  };
  std::vector<std::string> out;
  for (std::string& c : candidates) {
    bool seen = false;
    for (const std::string& o : out) seen = seen || key(o) == key(c);
    if (!seen) out.push_back(std::move(c));
  }
  return out;
}

std::optional<RepoRef> ParseRepoId(std::string_view model) {
  RepoRef ref;
  std::string_view repo = model;
  ref.revision = "main";
  if (const std::size_t at = model.find('@'); at != std::string_view::npos) {
    repo = model.substr(0, at);
    const std::string_view rev = model.substr(at + 1);
    if (!ValidRevision(rev)) return std::nullopt;
    ref.revision = std::string(rev);
  }
  const std::size_t slash = repo.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  if (!ValidRepoPart(repo.substr(0, slash)) || !ValidRepoPart(repo.substr(slash + 1))) {
    return std::nullopt;  // also rejects a second '/'
  }
  ref.repo_id = std::string(repo);
  return ref;
}

Result<std::string> ResolveModelPath(const std::string& model, const HubEnv& env) {
  std::error_code ec;
  if (model.empty()) return Status::InvalidArgument("the model path is empty");
  if (fs::exists(model, ec)) return model;
  const std::optional<RepoRef> ref = ParseRepoId(model);
  if (!ref) return model;  // a path: the checkpoint reader names it when it is missing
  std::string looked = "\n  " + model + " (no such folder)";
  const std::vector<std::string> dirs = HubCacheDirs(env);
  for (const std::string& dir : dirs) {
    std::string why;
    if (std::optional<std::string> found = FindInCache(dir, *ref, &why)) return *found;
    looked += "\n  " + why;
  }
  if (dirs.empty()) looked += "\n  (no cache folder: HF_HUB_CACHE, HF_HOME and HOME are unset)";
  return Status::InvalidArgument(
      "model '" + model + "' is neither a folder nor repo " + ref->repo_id + " at revision '" +
      ref->revision + "' in the local Hugging Face cache (hoist never downloads: fetch it first, " +
      "e.g. `huggingface-cli download " + ref->repo_id +
      "`, or give its folder). Looked at:" + looked);
}

}  // namespace hoist::planner
