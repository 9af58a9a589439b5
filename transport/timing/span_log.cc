#include "transport/timing/span_log.h"

#include <algorithm>

namespace hoist::transport {

std::uint32_t SpanLog::Intern(std::vector<std::string>& names, std::string_view name) {
  for (std::size_t i = names.size(); i-- > 0;) {  // the newest first: spans come in runs
    if (names[i] == name) return static_cast<std::uint32_t>(i);
  }
  names.emplace_back(name);
  return static_cast<std::uint32_t>(names.size() - 1);
}

std::uint32_t SpanLog::Lane(std::string_view name) { return Intern(lanes_, name); }

std::uint32_t SpanLog::Label(std::string_view text) { return Intern(labels_, text); }

void SpanLog::Add(std::string_view lane, std::string_view label, double start_s, double seconds,
                  std::uint64_t bytes, std::int64_t seq) {
  Span s;
  s.lane = Lane(lane);
  s.label = Label(label);
  s.seq = seq;
  s.start_s = start_s;
  s.seconds = seconds;
  s.bytes = bytes;
  spans_.push_back(s);
}

void SpanLog::Append(const SpanLog& other) {
  std::vector<std::uint32_t> lanes, labels;
  for (const std::string& n : other.lanes_) lanes.push_back(Lane(n));
  for (const std::string& n : other.labels_) labels.push_back(Label(n));
  spans_.reserve(spans_.size() + other.spans_.size());
  for (Span s : other.spans_) {
    s.lane = lanes[s.lane];
    s.label = labels[s.label];
    spans_.push_back(s);
  }
}

std::string SpanLog::What(const Span& span) const {
  std::string w = labels_[span.label];
  if (span.seq >= 0) {
    if (!w.empty()) w += ' ';
    w += "seq " + std::to_string(span.seq);
  }
  if (span.count > 1) w += " x" + std::to_string(span.count);
  return w;
}

std::vector<NamedSpan> SpanLog::Named() const {
  std::vector<NamedSpan> named;
  named.reserve(spans_.size());
  for (const Span& s : spans_) {
    named.push_back(NamedSpan{LaneName(s), What(s), s.start_s, s.seconds, s.bytes});
  }
  return named;
}

void SpanLog::AppendTo(proto::SpanTable* t) const {
  std::vector<std::uint32_t> lanes, labels;
  for (const std::string& n : lanes_) {
    auto it = std::find(t->lanes().begin(), t->lanes().end(), n);
    lanes.push_back(static_cast<std::uint32_t>(it - t->lanes().begin()));
    if (it == t->lanes().end()) t->add_lanes(n);
  }
  for (const std::string& n : labels_) {
    auto it = std::find(t->labels().begin(), t->labels().end(), n);
    labels.push_back(static_cast<std::uint32_t>(it - t->labels().begin()));
    if (it == t->labels().end()) t->add_labels(n);
  }
  const int n = t->lane_size() + static_cast<int>(spans_.size());
  t->mutable_lane()->Reserve(n);
  t->mutable_label()->Reserve(n);
  t->mutable_seq()->Reserve(n);
  t->mutable_count()->Reserve(n);
  t->mutable_start_s()->Reserve(n);
  t->mutable_seconds()->Reserve(n);
  t->mutable_bytes()->Reserve(n);
  for (const Span& s : spans_) {
    t->add_lane(lanes[s.lane]);
    t->add_label(labels[s.label]);
    t->add_seq(s.seq);
    t->add_count(s.count);
    t->add_start_s(s.start_s);
    t->add_seconds(s.seconds);
    t->add_bytes(s.bytes);
  }
}

Status SpanLog::Check(const proto::SpanTable& t) {
  const int n = t.lane_size();
  if (t.label_size() != n || t.seq_size() != n || t.count_size() != n || t.start_s_size() != n ||
      t.seconds_size() != n || t.bytes_size() != n) {
    return Status::Corrupt("span table: its columns differ in length (" + std::to_string(n) +
                           " lanes, " + std::to_string(t.label_size()) + " labels, " +
                           std::to_string(t.start_s_size()) + " starts)");
  }
  const auto lanes = static_cast<std::uint32_t>(t.lanes_size());
  const auto labels = static_cast<std::uint32_t>(t.labels_size());
  for (int i = 0; i < n; ++i) {
    if (t.lane(i) >= lanes || t.label(i) >= labels) {
      return Status::Corrupt("span table: span " + std::to_string(i) + " names lane " +
                             std::to_string(t.lane(i)) + " and label " +
                             std::to_string(t.label(i)) + " of " + std::to_string(lanes) + " and " +
                             std::to_string(labels));
    }
  }
  return Status::Ok();
}

Result<SpanLog> SpanLog::FromProto(const proto::SpanTable& t) {
  HOIST_RETURN_IF_ERROR(Check(t));
  SpanLog log;
  log.lanes_.assign(t.lanes().begin(), t.lanes().end());
  log.labels_.assign(t.labels().begin(), t.labels().end());
  log.spans_.reserve(t.lane_size());
  for (int i = 0; i < t.lane_size(); ++i) {
    log.spans_.push_back(
        Span{t.lane(i), t.label(i), t.seq(i), t.count(i), t.start_s(i), t.seconds(i), t.bytes(i)});
  }
  return log;
}

}  // namespace hoist::transport
