#include "coordinator/comm.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <thread>

#include "transport/peers/peer.h"

namespace hoist::coordinator {
namespace {

constexpr char kSilentNote[] = "stopped, hung or dead";

std::chrono::steady_clock::time_point DeadlineAfter(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(std::max(0.0, seconds)));
}

std::string Secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

void Backoff(int spin) {
  if (spin < 64) return;
  std::this_thread::sleep_for(std::chrono::microseconds(spin < 256 ? 20 : 500));
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

Status MpiStatus(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return Status::IoError(std::string(what) + ": " + std::string(msg, len));
}

// A Comm over a duplicate of `comm`. owns_mpi: MPI_Finalize in the destructor (hoist's own main);
// otherwise only the duplicate is freed (an engine's communicator).
class MpiComm final : public Comm {
 public:
  MpiComm(MPI_Comm comm, bool owns_mpi) : owns_mpi_(owns_mpi) {
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes, not as aborts, so every failure gets a message.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    host_ = Hostname();
    // Node = index of this host's shared-memory group, ordered by its lowest world rank.
    MPI_Comm shm;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shm);
    int shm_rank = 0;
    MPI_Comm_rank(shm, &shm_rank);
    local_rank_ = shm_rank;
    MPI_Comm leaders;
    MPI_Comm_split(comm_, shm_rank == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders);
    int leader_index = 0;
    if (leaders != MPI_COMM_NULL) {
      MPI_Comm_rank(leaders, &leader_index);
      MPI_Comm_size(leaders, &nodes_);
      MPI_Comm_free(&leaders);
    }
    MPI_Bcast(&leader_index, 1, MPI_INT, 0, shm);
    MPI_Bcast(&nodes_, 1, MPI_INT, 0, shm);
    node_ = leader_index;
    MPI_Comm_free(&shm);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    // Messages still on their way are given a few seconds (their receivers normally took them
    // long ago); any left are cancelled rather than waited for.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (Reap() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (auto& p : sends_) {
      MPI_Cancel(&p->request);
      MPI_Request_free(&p->request);
      p.release();  // MPI may still read it: leaked on purpose
    }
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node() const override { return node_; }
  int nodes() const override { return nodes_; }
  int local_rank() const override { return local_rank_; }
  std::string host() const override { return host_; }

  const void* mpi_handle() const override { return &comm_; }

  Status Send(int to, Channel channel, std::string data) override {
    Reap();
    if (data.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      return Status::Unsupported("control message of " + std::to_string(data.size()) +
                                 " bytes exceeds 2 GiB");
    }
    auto pending = std::make_unique<Pending>();
    pending->data = std::move(data);
    HOIST_RETURN_IF_ERROR(
        MpiStatus(MPI_Isend(pending->data.data(), static_cast<int>(pending->data.size()), MPI_BYTE,
                            to, static_cast<int>(channel), comm_, &pending->request),
                  "MPI_Isend"));
    sends_.push_back(std::move(pending));
    return Status::Ok();
  }

  Result<std::optional<Message>> TryRecv(int from, Channel channel) override {
    Reap();
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    HOIST_RETURN_IF_ERROR(MpiStatus(MPI_Improbe(from < 0 ? MPI_ANY_SOURCE : from,
                                                static_cast<int>(channel), comm_, &flag, &msg, &st),
                                    "MPI_Improbe"));
    if (!flag) return std::optional<Message>();
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    Message m;
    m.from = st.MPI_SOURCE;
    m.data.resize(static_cast<std::size_t>(count));
    HOIST_RETURN_IF_ERROR(
        MpiStatus(MPI_Mrecv(m.data.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv"));
    return std::optional<Message>(std::move(m));
  }

  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);
  }

 private:
  struct Pending {
    std::string data;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // Frees the sends that completed; returns how many are still pending.
  std::size_t Reap() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&(*it)->request, &done, MPI_STATUS_IGNORE);
      it = done ? sends_.erase(it) : it + 1;
    }
    return sends_.size();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
  std::vector<std::unique_ptr<Pending>> sends_;
  int rank_ = 0;
  int size_ = 1;
  int node_ = 0;
  int nodes_ = 1;
  int local_rank_ = 0;
  std::string host_;
};

class SoloComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int node() const override { return 0; }
  int nodes() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string host() const override { return Hostname(); }
  const void* mpi_handle() const override { return nullptr; }
  Status Send(int to, Channel channel, std::string data) override {
    if (to != 0) return Status::InvalidArgument("solo comm: no rank " + std::to_string(to));
    inbox_[static_cast<int>(channel)].push_back(std::move(data));
    return Status::Ok();
  }
  Result<std::optional<Message>> TryRecv(int from, Channel channel) override {
    auto& box = inbox_[static_cast<int>(channel)];
    if (from > 0 || box.empty()) return std::optional<Message>();
    Message m{0, std::move(box.front())};
    box.pop_front();
    return std::optional<Message>(std::move(m));
  }
  [[noreturn]] void Abort(int exit_code) override { std::_Exit(exit_code); }

 private:
  std::map<int, std::deque<std::string>> inbox_;  // messages to self, per channel
};

}  // namespace

Result<Message> Await(Comm& comm, int from, Channel channel, double timeout_s,
                      const std::string& what) {
  const auto deadline = DeadlineAfter(timeout_s);
  for (int spin = 0;; ++spin) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, comm.TryRecv(from, channel));
    if (m) return std::move(*m);
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Aborted(what + ": nothing within " + std::to_string(timeout_s) + " s (" +
                             transport::kPeerFailureNote + ")");
    }
    Backoff(spin);
  }
}

Status Comm::Broadcast(std::string* data, double timeout_s) {
  if (size() == 1) return Status::Ok();
  if (rank() == 0) {
    for (int r = 1; r < size(); ++r) HOIST_RETURN_IF_ERROR(Send(r, Channel::kCollective, *data));
    return Status::Ok();
  }
  const auto deadline = DeadlineAfter(timeout_s);
  for (int spin = 0;; ++spin) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, TryRecv(0, Channel::kCollective));
    if (m) {
      *data = std::move(m->data);
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Aborted("rank 0 did not answer within " + Secs(timeout_s) + " (" +
                             kSilentNote + ")");
    }
    Backoff(spin);
  }
}

Result<std::vector<std::string>> Comm::Gather(const std::string& mine, double timeout_s) {
  if (rank() != 0) {
    HOIST_RETURN_IF_ERROR(Send(0, Channel::kCollective, mine));
    return std::vector<std::string>();
  }
  std::vector<std::optional<std::string>> got(static_cast<std::size_t>(size()));
  got[0] = mine;
  int missing = size() - 1;
  const auto deadline = DeadlineAfter(timeout_s);
  for (int spin = 0; missing > 0; ++spin) {
    HOIST_ASSIGN_OR_RETURN(std::optional<Message> m, TryRecv(-1, Channel::kCollective));
    if (m && !got[static_cast<std::size_t>(m->from)]) {
      got[static_cast<std::size_t>(m->from)] = std::move(m->data);
      --missing;
      spin = 0;
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string who;
      for (int r = 0; r < size(); ++r) {
        if (!got[static_cast<std::size_t>(r)]) who += (who.empty() ? "" : ", ") + std::to_string(r);
      }
      return Status::Aborted("rank(s) " + who + " did not answer within " + Secs(timeout_s) + " (" +
                             kSilentNote + ")");
    }
    Backoff(spin);
  }
  std::vector<std::string> out;
  for (auto& g : got) out.push_back(std::move(*g));
  return out;
}

namespace {

int EnvInt(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && x >= 0 && x < (1L << 30)) return static_cast<int>(x);
  }
  return -1;
}

}  // namespace

int LauncherRank() {
  return EnvInt({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"});
}

int LauncherLocalRank() {
  return EnvInt(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"});
}

bool LaunchedByMpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

Result<std::unique_ptr<Comm>> CreateMpiComm(int* argc, char*** argv) {
  int provided = 0;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return Status::IoError("MPI_Init_thread failed");
  return std::unique_ptr<Comm>(new MpiComm(MPI_COMM_WORLD, /*owns_mpi=*/true));
}

bool MpiActive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

Result<std::unique_ptr<Comm>> WrapMpiComm(const void* mpi_comm) {
  if (!MpiActive()) {
    return Status::FailedPrecondition(
        "an MPI communicator was given but MPI is not initialised (call MPI_Init first)");
  }
  const MPI_Comm comm = mpi_comm ? *static_cast<const MPI_Comm*>(mpi_comm) : MPI_COMM_WORLD;
  if (comm == MPI_COMM_NULL) {
    return Status::InvalidArgument("the MPI communicator is MPI_COMM_NULL");
  }
  return std::unique_ptr<Comm>(new MpiComm(comm, /*owns_mpi=*/false));
}

std::unique_ptr<Comm> CreateSoloComm() { return std::make_unique<SoloComm>(); }

Result<std::unique_ptr<Comm>> CreateLaunchComm(int* argc, char*** argv) {
  if (LaunchedByMpi()) return CreateMpiComm(argc, argv);
  return CreateSoloComm();
}

}  // namespace hoist::coordinator
