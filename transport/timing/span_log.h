// A load's spans: timed stretches of work on named lanes ("fill-3", "h2d-0", "setup"), the detail
// under a report's phases that its trace events and timeline rows are drawn from.
//
// A span is plain data: its lane and label are indices into names the log interns, so recording
// a load's thousands of spans allocates nothing per span. (Spans with two strings each cost an 8
// GB load about 2.5 ms of its clock: some 6,000 records made on fresh heap, then copied one
// message at a time into the report.) A span's name is its label, then " seq N" when it belongs
// to slot sequence N, then " xN" when it stands for N coalesced spans: "slot 2 seq 478",
// "read seq 12 x2". The report carries the log as columns (proto::SpanTable).
//
// Ownership: a SpanLog owns its names and spans; values throughout.
// Failure: Check and FromProto refuse a table whose columns differ in length or whose indices
// name no lane or label (a rank's report is input), saying which; nothing else fails.
// Threading: none inside; a log is written by one thread at a time (callers lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hoist/status.h"
#include "proto/plan.pb.h"

namespace hoist::transport {

// A span with its names spelled out (SpanLog::Named).
struct NamedSpan {
  std::string lane, what;
  double start_s = 0;
  double seconds = 0;
  std::uint64_t bytes = 0;
};

struct Span {
  std::uint32_t lane = 0;   // index into the log's lane names
  std::uint32_t label = 0;  // index into the log's labels
  std::int64_t seq = -1;    // the slot sequence it belongs to; -1: none
  std::uint32_t count = 1;  // the spans it stands for (more than one: coalesced)
  double start_s = 0;       // seconds since the load's origin
  double seconds = 0;
  std::uint64_t bytes = 0;
};

class SpanLog {
 public:
  // The index of a lane's name or a label, added on first use (a linear search: a log has a few
  // dozen names).
  std::uint32_t Lane(std::string_view name);
  std::uint32_t Label(std::string_view text);

  // Appends a span whose lane and label are this log's indices.
  void Add(const Span& span) { spans_.push_back(span); }
  // Appends a span by names.
  void Add(std::string_view lane, std::string_view label, double start_s, double seconds,
           std::uint64_t bytes = 0, std::int64_t seq = -1);
  // Appends another log's spans, their names re-interned here.
  void Append(const SpanLog& other);
  void Reserve(std::size_t spans) { spans_.reserve(spans); }

  std::size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  const Span& operator[](std::size_t i) const { return spans_[i]; }
  std::vector<Span>::const_iterator begin() const { return spans_.begin(); }
  std::vector<Span>::const_iterator end() const { return spans_.end(); }

  const std::string& LaneName(const Span& span) const { return lanes_[span.lane]; }
  // The span's name: "slot 2 seq 478", "read seq 12 x2", "sources opened".
  std::string What(const Span& span) const;

  // Every span with its names (a string pair each: for tests and tools, not a load's clock).
  std::vector<NamedSpan> Named() const;

  // Appends the spans to a report's table (names re-interned there).
  void AppendTo(proto::SpanTable* table) const;
  // Whether a report's table is well formed (what FromProto checks), without copying it.
  static Status Check(const proto::SpanTable& table);
  // The spans of a report's table, checked.
  static Result<SpanLog> FromProto(const proto::SpanTable& table);

 private:
  static std::uint32_t Intern(std::vector<std::string>& names, std::string_view name);

  std::vector<std::string> lanes_, labels_;
  std::vector<Span> spans_;
};

}  // namespace hoist::transport
