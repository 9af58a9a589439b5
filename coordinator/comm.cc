#include "coordinator/comm.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

namespace hoist::coordinator {
namespace {

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
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node() const override { return node_; }
  int nodes() const override { return nodes_; }
  int local_rank() const override { return local_rank_; }
  std::string host() const override { return host_; }

  Status Broadcast(std::string* data) override {
    unsigned long long n = data->size();
    HOIST_RETURN_IF_ERROR(
        MpiStatus(MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, 0, comm_), "MPI_Bcast(plan size)"));
    if (n > static_cast<unsigned long long>(std::numeric_limits<int>::max())) {
      return Status::Unsupported("plan of " + std::to_string(n) + " bytes exceeds 2 GiB");
    }
    data->resize(n);
    return MpiStatus(MPI_Bcast(data->data(), static_cast<int>(n), MPI_BYTE, 0, comm_),
                     "MPI_Bcast(plan)");
  }

  Result<std::vector<std::string>> Gather(const std::string& mine) override {
    int n = static_cast<int>(mine.size());
    std::vector<int> sizes(rank_ == 0 ? size_ : 0);
    HOIST_RETURN_IF_ERROR(
        MpiStatus(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_), "MPI_Gather"));
    std::vector<int> displs(sizes.size());
    int total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      displs[i] = total;
      total += sizes[i];
    }
    std::string all(rank_ == 0 ? total : 0, '\0');
    HOIST_RETURN_IF_ERROR(MpiStatus(MPI_Gatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(),
                                                displs.data(), MPI_BYTE, 0, comm_),
                                    "MPI_Gatherv"));
    std::vector<std::string> out;
    for (size_t i = 0; i < sizes.size(); ++i) out.push_back(all.substr(displs[i], sizes[i]));
    return out;
  }

  Result<double> AllreduceMax(double value) override {
    double out = 0;
    HOIST_RETURN_IF_ERROR(
        MpiStatus(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce"));
    return out;
  }

  Status AllreduceSum(double* values, int n) override {
    return MpiStatus(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, comm_),
                     "MPI_Allreduce(sum)");
  }

  void Barrier() override { MPI_Barrier(comm_); }

  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owns_mpi_ = false;
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
  Status Broadcast(std::string*) override { return Status::Ok(); }
  Result<std::vector<std::string>> Gather(const std::string& mine) override {
    return std::vector<std::string>{mine};
  }
  Result<double> AllreduceMax(double value) override { return value; }
  Status AllreduceSum(double*, int) override { return Status::Ok(); }
  void Barrier() override {}
  [[noreturn]] void Abort(int exit_code) override { std::_Exit(exit_code); }
};

}  // namespace

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

}  // namespace hoist::coordinator
