// Which rank the job names when ranks fail: decided by the reports' stopped_by and
// peer_timed_out fields, never by the text of their errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "coordinator/job.h"
#include "transport/peers/peer.h"

namespace hoist::coordinator {
namespace {

const std::string kNote = transport::kPeerFailureNote;

proto::RankReport Ok(std::uint32_t rank) {
  proto::RankReport r;
  r.set_rank(rank);
  r.set_host("host" + std::to_string(rank));
  r.set_ok(true);
  r.set_stopped_by(-1);
  return r;
}

proto::RankReport Failed(std::uint32_t rank, const std::string& error, int stopped_by = -1,
                         bool peer_timed_out = false) {
  proto::RankReport r = Ok(rank);
  r.set_ok(false);
  r.set_error(error);
  r.set_stopped_by(stopped_by);
  r.set_peer_timed_out(peer_timed_out);
  return r;
}

TEST(BlameTest, AllOkIsOk) {
  EXPECT_TRUE(Blame({Ok(0), Ok(1), Ok(2)}).ok());
  EXPECT_TRUE(Blame({}).ok());
}

TEST(BlameTest, NamesTheRankThatFailedOnItsOwnNotTheOnesItStopped) {
  const Status s = Blame({Failed(0, "Aborted: stopped because rank 2 failed", 2), Ok(1),
                          Failed(2, "IoError: shard.safetensors: read at offset 4096: EIO"),
                          Failed(3, "Aborted: timed out waiting", -1, true)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_EQ(s.message(),
            "rank 2 on host2 failed: IoError: shard.safetensors: read at offset 4096: EIO");
}

TEST(BlameTest, TheNoteInAMessageDoesNotCount) {
  // Rank 1's error mentions the peer-failure note, but its report says it failed on its own
  // (a transport error of its own, say): it is the one to name, not rank 0 which timed out.
  const Status s = Blame({Failed(0, "Aborted: timed out", -1, true),
                          Failed(1, "Aborted: mpi peer: MPI_ERR_TRUNCATE (" + kNote + ")")});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("rank 1 on host1 failed: ", 0), 0u) << s.message();
}

TEST(BlameTest, AFieldWithoutTheNoteStillCounts) {
  // No note in rank 0's text, but its report says it gave up waiting for another rank.
  const Status s =
      Blame({Failed(0, "Aborted: waited", -1, true), Ok(1), Failed(2, "Corrupt: bad header")});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "rank 2 on host2 failed: Corrupt: bad header");
}

TEST(BlameTest, WhenEveryFailedRankWasStoppedTheFirstFailedIsNamed) {
  const Status s = Blame({Ok(0), Failed(1, "Aborted: stopped because rank 3 failed", 3),
                          Failed(2, "Aborted: timed out", -1, true)});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "rank 1 on host1 failed: Aborted: stopped because rank 3 failed");
}

// The job fails with its blamed rank's own code (every rank exits alike), said once.
TEST(BlameTest, TheJobTakesTheCausesCode) {
  proto::RankReport bad = Failed(1, "InvalidArgument: rank 1: cuda:1: no such device");
  bad.set_error_code(static_cast<std::uint32_t>(Code::kInvalidArgument));
  const Status s = Blame({Ok(0), bad});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "rank 1 on host1 failed: rank 1: cuda:1: no such device");
  proto::RankReport odd = Failed(1, "x");
  odd.set_error_code(200);  // out of range: Aborted
  EXPECT_EQ(Blame({odd}).code(), Code::kAborted);
}

TEST(BlameTest, TheFirstOwnFailureInRankOrderWins) {
  const Status s = Blame({Failed(0, "x", 1), Failed(1, "IoError: a"), Failed(2, "IoError: b")});
  EXPECT_EQ(s.message(), "rank 1 on host1 failed: IoError: a");
}

TEST(BlameTest, StoppedByAnotherRankReadsOnlyTheFields) {
  EXPECT_FALSE(StoppedByAnotherRank(Ok(0)));
  EXPECT_FALSE(StoppedByAnotherRank(Failed(0, "stopped because rank 1 failed (" + kNote + ")")));
  EXPECT_TRUE(StoppedByAnotherRank(Failed(0, "", 1)));
  EXPECT_TRUE(StoppedByAnotherRank(Failed(0, "", 0)));
  EXPECT_TRUE(StoppedByAnotherRank(Failed(0, "", -1, true)));
  // A rank that succeeded was stopped by nobody, whatever its fields say.
  proto::RankReport ok = Ok(0);
  ok.set_stopped_by(2);
  ok.set_peer_timed_out(true);
  EXPECT_FALSE(StoppedByAnotherRank(ok));
}

}  // namespace
}  // namespace hoist::coordinator
