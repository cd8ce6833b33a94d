#include "mpi_harness.h"

#include "common/error.h"

namespace sluice::transport::testing {
namespace {

const MpiSession* session_ = nullptr;
int next_channel_id = 0;

// A two-rank barrier with a deadline, on its own tag so that a side that returned early cannot
// be met by the next test's barrier.
void meet(const MpiSession& session, int tag, const std::string& what) {
  const int peer = 1 - session.rank();
  const Deadline deadline = deadline_after(60.0);
  send_string(session, peer, tag, "here", deadline, what);
  receive_string(session, peer, tag, deadline, what);
}

}  // namespace

const MpiSession& test_session() { return *session_; }
void set_test_session(const MpiSession* session) { session_ = session; }

MpiHarness::MpiHarness(MpiTransport transport) : transport_(std::move(transport)) {
  if (!transport_.stage) {
    transport_.stage = [this](const std::vector<uint8_t>& bytes) {
      staged_ = bytes;
      return static_cast<const void*>(staged_.data());
    };
  }
  if (!transport_.fetch) {
    transport_.fetch = [](const ReceivedBatch& batch) {
      const auto* data = static_cast<const uint8_t*>(batch.data);
      return std::vector<uint8_t>(data, data + batch.bytes);
    };
  }
}

std::string MpiHarness::skip_reason() const {
  if (session_ == nullptr || session_->size() != 2) return "needs exactly two MPI ranks (mpirun -np 2)";
  return transport_.skip_reason ? transport_.skip_reason() : "";
}

void MpiHarness::run(ChannelOptions options, const std::function<void(SenderSide&)>& sender,
                     const std::function<void(ReceiverSide&)>& receiver) {
  const MpiSession& session = *session_;
  const int id = next_channel_id++ % 1024;
  options.channel_id = id;
  // Below the feed's tag range (0x4000..0x7fff).
  const int side_tag = 0x2000 + id;
  const int run_tag = 0x2400 + id;
  meet(session, run_tag, "the other rank to start the test");
  try {
    if (session.rank() == 0) {
      SenderSide side{nullptr, session.describe(1), [&] { meet(session, side_tag, "the receiving rank's barrier"); },
                      transport_.stage};
      side.channel = transport_.make_sender(session, 1, options);
      sender(side);
    } else {
      ReceiverSide side{nullptr, session.describe(0), [&] { meet(session, side_tag, "the sending rank's barrier"); },
                        transport_.fetch};
      side.channel = transport_.make_receiver(session, 0, options);
      receiver(side);
    }
  } catch (const std::exception& error) {
    ADD_FAILURE() << (session.rank() == 0 ? "the sending side threw: " : "the receiving side threw: ")
                  << error.what();
  }
  if (transport_.meet_after_test) meet(session, run_tag, "the other rank to finish the test");
}

}  // namespace sluice::transport::testing
