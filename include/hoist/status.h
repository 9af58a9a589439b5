// hoist::Status and hoist::Result<T>: the one error type of the project.
//
// Ownership: a Status owns its message; OK is a null pointer, so passing and returning OK costs
// nothing. Failure: functions that can fail return Status or Result<T>; no exception crosses a
// module boundary and library code never exits. Messages carry context (file, tensor, offset,
// rank), added outermost-first with Annotate(). Threading: a Status is a value; distinct objects
// may be used from distinct threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hoist {

enum class Code : unsigned char {
  kOk = 0,
  kInvalidArgument,     // bad flag, bad topology, bad request
  kNotFound,            // missing file, tensor or key
  kCorrupt,             // untrusted input that violates its format
  kIoError,             // the OS failed a read, open or stat
  kUnsupported,         // valid input this build or family cannot handle
  kFailedPrecondition,  // e.g. a file changed between plan and load
  kResourceExhausted,   // allocation failed
  kAborted,             // stopped because another rank failed
  kInternal,            // a bug
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : rep_(code == Code::kOk ? nullptr : new Rep{code, std::move(message)}) {}
  Status(const Status& other) : rep_(other.rep_ ? new Rep(*other.rep_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) rep_.reset(other.rep_ ? new Rep(*other.rep_) : nullptr);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corrupt(std::string m) { return {Code::kCorrupt, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {Code::kResourceExhausted, std::move(m)};
  }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const {
    static const std::string kEmpty;
    return rep_ ? rep_->message : kEmpty;
  }
  // "IoError: shard-1.safetensors: read at offset 4096: Input/output error"
  std::string ToString() const;

  // Prefixes context: Status::IoError("EIO").Annotate("rank 3") -> "rank 3: EIO". No-op on OK.
  Status& Annotate(std::string_view context) & {
    if (rep_) rep_->message = std::string(context) + ": " + rep_->message;
    return *this;
  }
  Status&& Annotate(std::string_view context) && { return std::move(Annotate(context)); }

 private:
  struct Rep {
    Code code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

inline std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kNotFound:
      return "NotFound";
    case Code::kCorrupt:
      return "Corrupt";
    case Code::kIoError:
      return "IoError";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Code::kResourceExhausted:
      return "ResourceExhausted";
    case Code::kAborted:
      return "Aborted";
    case Code::kInternal:
      return "Internal";
  }
  return "Unknown";
}

inline std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code())) + ": " + message();
}

// A value or the Status that explains its absence. Constructing from an OK Status is a bug and
// yields kInternal.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const& {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::move(std::get<T>(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hoist

#define HOIST_CONCAT_INNER_(a, b) a##b
#define HOIST_CONCAT_(a, b) HOIST_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function when it is not OK.
#define HOIST_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::hoist::Status hoist_status_ = (expr);        \
    if (!hoist_status_.ok()) return hoist_status_; \
  } while (0)

// `HOIST_ASSIGN_OR_RETURN(auto x, ComputeX());` unwraps a Result or returns its Status.
#define HOIST_ASSIGN_OR_RETURN(lhs, expr) \
  HOIST_ASSIGN_OR_RETURN_IMPL_(HOIST_CONCAT_(hoist_result_, __LINE__), lhs, expr)
#define HOIST_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
