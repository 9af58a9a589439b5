// SpanLog: interned names, a span's name from its label, sequence and count, and the report's
// columns written, read back and checked (and refused when malformed).
#include "transport/timing/span_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hoist::transport {
namespace {

TEST(SpanLog, InternsEachNameOnce) {
  SpanLog log;
  EXPECT_EQ(log.Lane("fill-0"), 0u);
  EXPECT_EQ(log.Lane("h2d-0"), 1u);
  EXPECT_EQ(log.Lane("fill-0"), 0u);
  EXPECT_EQ(log.Label("slot 3"), 0u);
  EXPECT_EQ(log.Label("read"), 1u);
  EXPECT_EQ(log.Label("slot 3"), 0u);
}

TEST(SpanLog, ASpansNameIsItsLabelSequenceAndCount) {
  SpanLog log;
  const std::uint32_t lane = log.Lane("h2d-0");
  log.Add(Span{lane, log.Label("slot 2"), 478, 1, 0.5, 0.25, 16});
  log.Add(Span{lane, log.Label("read"), 12, 2, 0.5, 0.25, 16});
  log.Add(Span{lane, log.Label(""), 7, 1, 0.5, 0.25, 16});  // a submit: "seq 7"
  log.Add("sources", "sources opened", 0.125, 0.0625);
  const std::vector<NamedSpan> named = log.Named();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].what, "slot 2 seq 478");
  EXPECT_EQ(named[1].what, "read seq 12 x2");
  EXPECT_EQ(named[2].what, "seq 7");
  EXPECT_EQ(named[3].what, "sources opened");
  EXPECT_EQ(named[3].lane, "sources");
  EXPECT_EQ(named[3].start_s, 0.125);
  EXPECT_EQ(named[3].seconds, 0.0625);
  EXPECT_EQ(named[0].bytes, 16u);
}

// Two logs with names in different orders go into one table (as the worker appends the sources'
// span, then the pipeline's); reading it back gives every span with its own names.
TEST(SpanLog, TableRoundTripKeepsEverySpansNames) {
  SpanLog first, second;
  first.Add("sources", "sources opened", 0.1, 0.01);
  first.Add("fill-0", "read", 0.2, 0.02, 100, 4);
  second.Add("fill-0", "read", 0.3, 0.03, 200, 5);
  second.Add("h2d-0", "slot 1", 0.4, 0.04, 300, 5);
  second.Add("sources", "again", 0.5, 0.05);
  proto::SpanTable table;
  first.AppendTo(&table);
  second.AppendTo(&table);
  EXPECT_EQ(table.lanes_size(), 3) << "names interned across appends";
  Result<SpanLog> back = SpanLog::FromProto(table);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  std::vector<NamedSpan> want = first.Named();
  for (const NamedSpan& n : second.Named()) want.push_back(n);
  const std::vector<NamedSpan> got = back->Named();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].lane, want[i].lane);
    EXPECT_EQ(got[i].what, want[i].what);
    EXPECT_EQ(got[i].start_s, want[i].start_s);
    EXPECT_EQ(got[i].seconds, want[i].seconds);
    EXPECT_EQ(got[i].bytes, want[i].bytes);
  }
  SpanLog merged;  // Append re-interns the same way
  merged.Append(first);
  merged.Append(second);
  const std::vector<NamedSpan> appended = merged.Named();
  ASSERT_EQ(appended.size(), want.size());
  for (std::size_t i = 0; i < appended.size(); ++i) EXPECT_EQ(appended[i].what, want[i].what);
}

TEST(SpanLog, FromProtoRefusesAMalformedTable) {
  SpanLog log;
  log.Add("fill-0", "read", 0.2, 0.02, 100, 4);
  log.Add("h2d-0", "slot 1", 0.4, 0.04, 300, 5);
  proto::SpanTable good;
  log.AppendTo(&good);
  ASSERT_TRUE(SpanLog::FromProto(good).ok());
  EXPECT_TRUE(SpanLog::Check(good).ok());

  proto::SpanTable short_column = good;
  short_column.mutable_seconds()->RemoveLast();
  Result<SpanLog> r = SpanLog::FromProto(short_column);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("differ in length"), std::string::npos);
  EXPECT_EQ(SpanLog::Check(short_column).code(), Code::kCorrupt);

  proto::SpanTable bad_lane = good;
  bad_lane.set_lane(1, 2);  // two lanes: 0 and 1
  r = SpanLog::FromProto(bad_lane);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("span 1 names lane 2"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(SpanLog::Check(bad_lane).code(), Code::kCorrupt);

  proto::SpanTable bad_label = good;
  bad_label.set_label(0, 9);
  EXPECT_FALSE(SpanLog::FromProto(bad_label).ok());
  EXPECT_EQ(SpanLog::Check(bad_label).code(), Code::kCorrupt);
}

}  // namespace
}  // namespace hoist::transport
