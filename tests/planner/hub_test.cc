// Tests of planner/hub.h on a fake Hugging Face cache built here as huggingface_hub writes it:
// models--org--name/{refs/<revision>, blobs/<sha>, snapshots/<hash>/<file> -> ../../blobs/<sha>}.
// Repo ids resolve to the snapshot folder by ref, tag or commit hash, caches are searched in
// order, an existing folder wins, and a model in no cache fails naming every place looked.
#include "planner/hub.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/scratch_dir.h"

namespace hoist::planner {
namespace {

namespace fs = std::filesystem;

const char kHashMain[] = "0123456789abcdef0123456789abcdef01234567";
const char kHashV1[] = "fedcba9876543210fedcba9876543210fedcba98";

void WriteFile(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// <cache>/models--<org>--<name> with refs/main -> kHashMain, refs/v1 -> kHashV1 and a snapshot
// per hash whose config.json is a relative symlink into blobs/.
fs::path MakeRepo(const fs::path& cache, const std::string& org, const std::string& name) {
  const fs::path repo = cache / ("models--" + org + "--" + name);
  WriteFile(repo / "refs" / "main", kHashMain);  // the hub writes no trailing newline
  WriteFile(repo / "refs" / "v1", std::string(kHashV1) + "\n");
  for (const char* hash : {kHashMain, kHashV1}) {
    const std::string blob = std::string("blob-") + hash;
    WriteFile(repo / "blobs" / blob, "{\"model_type\": \"qwen3\"}");
    fs::create_directories(repo / "snapshots" / hash);
    fs::create_symlink(fs::path("../../blobs") / blob, repo / "snapshots" / hash / "config.json");
  }
  return repo;
}

TEST(HubTest, ParsesRepoIds) {
  std::optional<RepoRef> r = ParseRepoId("Qwen/Qwen3-4B");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "Qwen/Qwen3-4B");
  EXPECT_EQ(r->revision, "main");
  r = ParseRepoId("Qwen/Qwen3-4B@v1.0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->repo_id, "Qwen/Qwen3-4B");
  EXPECT_EQ(r->revision, "v1.0");
  r = ParseRepoId("org/name@refs/pr/1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->revision, "refs/pr/1");
  for (const char* bad :
       {"/abs/path", "./rel", "../up/x", "a/b/c", "noslash", "a/", "/b", "a/b@", "a/b@../x",
        "a--b/c", "-a/b", "a./b", "a b/c", "a/b@x y", "", "a/b@/main"}) {
    EXPECT_FALSE(ParseRepoId(bad)) << bad;
  }
}

TEST(HubTest, CacheDirsInOrderWithoutDuplicates) {
  HubEnv env;
  env.hf_hub_cache = "/c1";
  env.huggingface_hub_cache = "/c1/";  // the same folder spelt differently
  env.hf_home = "/h";
  env.xdg_cache_home = "/x";
  env.home = "/home/u";
  EXPECT_EQ(HubCacheDirs(env), (std::vector<std::string>{"/c1", "/h/hub", "/x/huggingface/hub",
                                                         "/home/u/.cache/huggingface/hub"}));
  EXPECT_TRUE(HubCacheDirs(HubEnv{}).empty());
}

TEST(HubTest, ResolvesRefTagAndCommit) {
  testing::ScratchDir tmp("hoist-hub");
  const fs::path cache = fs::path(tmp.path()) / "cache";
  const fs::path repo = MakeRepo(cache, "Qwen", "Qwen3-4B");
  HubEnv env;
  env.hf_hub_cache = cache.string();

  Result<std::string> r = ResolveModelPath("Qwen/Qwen3-4B", env);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (repo / "snapshots" / kHashMain).string());
  // The snapshot's file is readable through its symlink, as the checkpoint reader will read it.
  std::ifstream cfg(fs::path(*r) / "config.json");
  std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"model_type\": \"qwen3\"}");

  r = ResolveModelPath("Qwen/Qwen3-4B@v1", env);  // a tag, ref file with a newline
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (repo / "snapshots" / kHashV1).string());

  r = ResolveModelPath(std::string("Qwen/Qwen3-4B@") + kHashV1, env);  // a commit, no ref needed
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (repo / "snapshots" / kHashV1).string());
}

TEST(HubTest, SearchesCachesInOrderAndHomeFallbacks) {
  testing::ScratchDir tmp("hoist-hub");
  const fs::path home = fs::path(tmp.path()) / "home";
  const fs::path hf_home = fs::path(tmp.path()) / "hf";
  const fs::path in_home = MakeRepo(home / ".cache" / "huggingface" / "hub", "org", "m");
  HubEnv env;
  env.home = home.string();
  env.hf_hub_cache = (fs::path(tmp.path()) / "empty-cache").string();  // searched first, absent
  Result<std::string> r = ResolveModelPath("org/m", env);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (in_home / "snapshots" / kHashMain).string());

  // HF_HOME/hub comes before ~/.cache: the first cache holding the repo wins.
  const fs::path in_hf_home = MakeRepo(hf_home / "hub", "org", "m");
  env.hf_home = hf_home.string();
  r = ResolveModelPath("org/m", env);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (in_hf_home / "snapshots" / kHashMain).string());
}

TEST(HubTest, AnExistingFolderWins) {
  testing::ScratchDir tmp("hoist-hub");
  const fs::path cache = fs::path(tmp.path()) / "cache";
  MakeRepo(cache, "org", "m");
  const fs::path local = fs::path(tmp.path()) / "org" / "m";
  fs::create_directories(local);
  HubEnv env;
  env.hf_hub_cache = cache.string();
  Result<std::string> r = ResolveModelPath(local.string(), env);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, local.string());
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp.path());  // "org/m" now names the local folder
  r = ResolveModelPath("org/m", env);
  fs::current_path(cwd);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "org/m");
}

TEST(HubTest, AbsentRepoNamesEveryPlaceLooked) {
  testing::ScratchDir tmp("hoist-hub");
  const fs::path c1 = fs::path(tmp.path()) / "c1";
  const fs::path hf_home = fs::path(tmp.path()) / "hf";
  const fs::path home = fs::path(tmp.path()) / "home";
  MakeRepo(c1, "org", "other");  // a different repo: not a match
  HubEnv env;
  env.hf_hub_cache = c1.string();
  env.hf_home = hf_home.string();
  env.home = home.string();
  Result<std::string> r = ResolveModelPath("org/m@main", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("org/m@main (no such folder)"), std::string::npos) << m;
  EXPECT_NE(m.find((c1 / "models--org--m").string() + " (not there)"), std::string::npos) << m;
  EXPECT_NE(m.find((hf_home / "hub" / "models--org--m").string()), std::string::npos) << m;
  EXPECT_NE(m.find((home / ".cache/huggingface/hub/models--org--m").string()), std::string::npos)
      << m;
  EXPECT_NE(m.find("never downloads"), std::string::npos) << m;

  r = ResolveModelPath("org/m", HubEnv{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no cache folder"), std::string::npos);

  // Not a repo id: unchanged, for the checkpoint reader to report as a missing folder.
  const std::string missing = (fs::path(tmp.path()) / "missing").string();
  r = ResolveModelPath(missing, env);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, missing);
}

TEST(HubTest, UnknownRevisionAndMissingSnapshotAreNamed) {
  testing::ScratchDir tmp("hoist-hub");
  const fs::path cache = fs::path(tmp.path()) / "cache";
  const fs::path repo = MakeRepo(cache, "org", "m");
  HubEnv env;
  env.hf_hub_cache = cache.string();
  Result<std::string> r = ResolveModelPath("org/m@v2", env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find((repo / "refs" / "v2").string() + " (no such ref"),
            std::string::npos)
      << r.status().message();

  fs::remove_all(repo / "snapshots" / kHashV1);  // the ref survives, the snapshot is gone
  r = ResolveModelPath("org/m@v1", env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find((repo / "snapshots" / kHashV1).string() + " (missing"),
            std::string::npos)
      << r.status().message();

  WriteFile(repo / "refs" / "bad", "../../etc");  // a ref that is not a hash
  r = ResolveModelPath("org/m@bad", env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not hold a commit hash"), std::string::npos);
}

}  // namespace
}  // namespace hoist::planner
