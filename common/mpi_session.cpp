#include "common/mpi_session.h"

#include <thread>

#include "common/error.h"
#include "common/host.h"
#include "common/log.h"

namespace sluice {
namespace {

// Polling interval of the deadline loops: short against any deadline a user sets (seconds),
// long enough not to burn a core while waiting.
constexpr auto poll_interval = std::chrono::microseconds(200);

}  // namespace

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw TransportError(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

bool check_mpi_or_warn(int code, const char* call) noexcept {
  if (code == MPI_SUCCESS) return true;
  try {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    log::get("common")->warn("{} failed: {}", call, std::string(text, static_cast<size_t>(length)));
  } catch (...) {
    // Logging failed too: nothing more can be said from a clean-up path.
  }
  return false;
}

MpiCommunicator MpiCommunicator::split(MPI_Comm parent, bool member, int key, const char* what) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(parent, member ? 1 : MPI_UNDEFINED, key, &comm),
            (std::string("MPI_Comm_split(") + what + ")").c_str());
  return MpiCommunicator(comm);
}

MpiCommunicator::~MpiCommunicator() { free(); }

MpiCommunicator::MpiCommunicator(MpiCommunicator&& other) noexcept : comm_(other.comm_) {
  other.comm_ = MPI_COMM_NULL;
}

MpiCommunicator& MpiCommunicator::operator=(MpiCommunicator&& other) noexcept {
  if (this != &other) {
    free();
    comm_ = other.comm_;
    other.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

void MpiCommunicator::free() noexcept {
  if (comm_ == MPI_COMM_NULL) return;
  int finalised = 0;
  MPI_Finalized(&finalised);  // after MPI_Finalize there is nothing left to free
  if (!finalised) {
    // Local in practice: it marks the communicator for release once pending requests complete,
    // so a failed run (a reduction still outstanding) does not wait here.
    check_mpi_or_warn(MPI_Comm_free(&comm_), "MPI_Comm_free");
  }
  comm_ = MPI_COMM_NULL;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    // SERIALIZED, not FUNNELED: on a CUDA trainer the gradient hooks that start each bucket's
    // all-reduce run on torch's autograd thread for the device while the main thread waits in
    // backward(), so MPI is called from two threads, never at the same time.
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    owns_mpi_ = true;
  }
  // Errors come back as codes so that check_mpi() can turn them into exceptions with context.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);

  constexpr int host_chars = 64;
  std::string mine = host_name();
  mine.resize(host_chars, '\0');
  std::vector<char> all(static_cast<size_t>(host_chars) * static_cast<size_t>(size_));
  check_mpi(MPI_Allgather(mine.data(), host_chars, MPI_CHAR, all.data(), host_chars, MPI_CHAR,
                      MPI_COMM_WORLD),
        "MPI_Allgather(host names)");
  for (int r = 0; r < size_; ++r) {
    hosts_.emplace_back(all.data() + static_cast<size_t>(r) * host_chars);
  }
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
        "MPI_Comm_split_type");
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  log::set_identity(rank_, host());
}

MpiSession::~MpiSession() {
  if (owns_mpi_) {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  }
}

std::string MpiSession::describe(int rank) const {
  if (rank < 0 || rank >= size_) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(rank) + " (host " + host_of(rank) + ")";
}

void MpiSession::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest.
}


void send_string(const MpiSession& session, int destination, int tag, const std::string& payload,
                 Deadline deadline, const std::string& what) {
  MPI_Request request;
  check_mpi(MPI_Isend(payload.data(), static_cast<int>(payload.size()), MPI_CHAR, destination, tag,
                  session.world(), &request),
        "MPI_Isend");
  int done = 0;
  while (true) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      MPI_Cancel(&request);
      throw TransportError("timed out sending " + what + " to " + session.describe(destination) +
                           ": it did not receive in time (dead, hung, or far behind)");
    }
    std::this_thread::sleep_for(poll_interval);
  }
}

bool try_receive_string(const MpiSession& session, int tag, std::string& payload, int& sender) {
  int arrived = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, tag, session.world(), &arrived, &status), "MPI_Iprobe");
  if (!arrived) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  payload.assign(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Recv(payload.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, session.world(),
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
  sender = status.MPI_SOURCE;
  return true;
}

std::string receive_string(const MpiSession& session, int source, int tag, Deadline deadline,
                           const std::string& what, int* sender) {
  MPI_Status status;
  while (true) {
    int arrived = 0;
    check_mpi(MPI_Iprobe(source, tag, session.world(), &arrived, &status), "MPI_Iprobe");
    if (arrived) break;
    if (std::chrono::steady_clock::now() > deadline) {
      throw TransportError("timed out waiting for " + what + " from " +
                           (source == MPI_ANY_SOURCE ? std::string("any rank")
                                                     : session.describe(source)) +
                           ": the rank died, hung, or is far behind (raise runtime.timeout_s if "
                           "it is only slow)");
    }
    std::this_thread::sleep_for(poll_interval);
  }
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string payload(static_cast<size_t>(count), '\0');
  check_mpi(MPI_Recv(payload.data(), count, MPI_CHAR, status.MPI_SOURCE, tag, session.world(),
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
  if (sender != nullptr) *sender = status.MPI_SOURCE;
  return payload;
}

std::vector<std::string> gather_strings(const MpiSession& session, const std::string& local,
                                        int tag, double timeout_s, const std::string& what) {
  const Deadline deadline = deadline_after(timeout_s);
  if (session.rank() != 0) {
    send_string(session, 0, tag, local, deadline, what);
    return {};
  }
  std::vector<std::string> all(static_cast<size_t>(session.size()));
  std::vector<bool> heard(static_cast<size_t>(session.size()), false);
  all[0] = local;
  heard[0] = true;
  for (int received = 1; received < session.size(); ++received) {
    int sender = -1;
    try {
      std::string payload = receive_string(session, MPI_ANY_SOURCE, tag, deadline, what, &sender);
      all[static_cast<size_t>(sender)] = std::move(payload);
      heard[static_cast<size_t>(sender)] = true;
    } catch (const TransportError&) {
      std::string missing;
      for (int r = 0; r < session.size(); ++r) {
        if (!heard[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + session.describe(r);
      }
      throw TransportError("timed out after " + std::to_string(timeout_s) + " s waiting for " +
                           what + "; never arrived from: " + missing);
    }
  }
  return all;
}

std::string broadcast_string(const MpiSession& session, const std::string& value, int tag,
                             double timeout_s, const std::string& what) {
  const Deadline deadline = deadline_after(timeout_s);
  if (session.rank() == 0) {
    // Post every send first so that one slow receiver does not delay the others.
    std::vector<MPI_Request> requests(static_cast<size_t>(session.size() - 1));
    for (int r = 1; r < session.size(); ++r) {
      check_mpi(MPI_Isend(value.data(), static_cast<int>(value.size()), MPI_CHAR, r, tag,
                      session.world(), &requests[static_cast<size_t>(r - 1)]),
            "MPI_Isend");
    }
    while (!requests.empty()) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                        MPI_STATUSES_IGNORE),
            "MPI_Testall");
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        throw TransportError("timed out after " + std::to_string(timeout_s) + " s sending " + what +
                             " to the other ranks");
      }
      std::this_thread::sleep_for(poll_interval);
    }
    return value;
  }
  return receive_string(session, 0, tag, deadline, what);
}

}  // namespace sluice
