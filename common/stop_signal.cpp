#include "common/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace sluice {
namespace {

std::atomic<int> received_signal{0};

extern "C" void on_stop_signal(int signal) { received_signal.store(signal); }

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

bool stop_requested() { return received_signal.load() != 0; }

const char* stop_signal_name() { return received_signal.load() == SIGUSR1 ? "SIGUSR1" : "SIGTERM"; }

}  // namespace sluice
