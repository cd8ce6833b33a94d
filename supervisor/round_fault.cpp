#include "supervisor/round_fault.h"

#include <regex>

namespace sluice::supervisor {
namespace {

// How telling a fault is (round_fault.h): a later line replaces the fault only when it says more.
int weight(const RoundFault& fault) {
  switch (fault.kind) {
    case FaultKind::none: return 0;
    case FaultKind::exited: return 1;
    case FaultKind::killed:
    case FaultKind::lost: return 3;
    case FaultKind::silent: return fault.after_stop ? 2 : 4;
    case FaultKind::stuck: return 4;
  }
  return 0;
}

// srun names the signal, not its number.
int signal_number(const std::string& name) {
  if (name == "Killed") return 9;
  if (name == "Terminated") return 15;
  if (name == "Segmentation fault") return 11;
  if (name == "Bus error") return 7;
  if (name == "Aborted") return 6;
  return 0;
}

std::string clipped(const std::string& line) { return line.size() > 300 ? line.substr(0, 300) + "..." : line; }

const std::regex silent_words(R"(rank (\d+) \(host ([^)]+)\) gave no sign of life for ([0-9.]+) s)");
const std::regex stuck_words(R"(rank (\d+) \(host ([^)]+)\) is stuck: no progress for ([0-9.]+) s)");
const std::regex mpirun_signal(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
const std::regex mpirun_status(R"(process rank (\d+) with PID \d+ on node (\S+) exited on non-zero status (\d+))");
const std::regex mpirun_lost(R"(Remote daemon: \S+ on node (\S+))");
const std::regex srun_exit(R"(srun: error: (\S+): tasks? (\d+)[-,0-9]*: Exited with exit code (\d+))");
const std::regex srun_signal(R"(srun: error: (\S+): tasks? (\d+)[-,0-9]*: (Killed|Terminated|Segmentation fault|Bus error|Aborted))");
const std::regex srun_node(R"(srun: error: Node failure on (\S+))");
const std::regex step_words(R"(\bstep (\d+)/\d+ \(epoch \d+\))");

}  // namespace

const char* to_string(FaultKind kind) {
  switch (kind) {
    case FaultKind::none: return "none";
    case FaultKind::exited: return "exited";
    case FaultKind::killed: return "killed";
    case FaultKind::lost: return "lost";
    case FaultKind::silent: return "silent";
    case FaultKind::stuck: return "stuck";
  }
  return "none";
}

std::string RoundFault::describe() const {
  std::string who = rank >= 0 ? "rank " + std::to_string(rank) : std::string("a rank");
  if (!host.empty()) who += (rank >= 0 ? " (host " + host + ")" : " on host " + host);
  char seconds[32];
  switch (kind) {
    case FaultKind::silent:
      std::snprintf(seconds, sizeof(seconds), "%.1f", silent_s);
      return who + " gave no sign of life for " + seconds + " s";
    case FaultKind::stuck:
      std::snprintf(seconds, sizeof(seconds), "%.1f", stuck_s);
      return who + " made no progress for " + seconds + " s (stuck)";
    case FaultKind::killed:
      return who + " was killed by signal " + (signal > 0 ? std::to_string(signal) : std::string("?")) +
             (signal_name.empty() ? "" : " (" + signal_name + ")");
    case FaultKind::lost: return "host " + host + " was lost (its daemon or link went away)";
    case FaultKind::exited: return who + " exited with code " + std::to_string(exit_code);
    case FaultKind::none: return "no fault named";
  }
  return "";
}

nlohmann::json RoundFault::to_json() const {
  nlohmann::json out = {{"kind", to_string(kind)}, {"rank", rank}, {"host", host}, {"words", words}};
  if (kind == FaultKind::killed) out["signal"] = signal;
  if (kind == FaultKind::exited) out["exit_code"] = exit_code;
  if (kind == FaultKind::silent) out["silent_s"] = silent_s;
  if (kind == FaultKind::stuck) out["stuck_s"] = stuck_s;
  return out;
}

void FaultReader::offer(RoundFault fault) {
  if (weight(fault) > weight(fault_)) fault_ = std::move(fault);
}

void FaultReader::read(const std::string& line, Clock::time_point at) {
  std::smatch m;
  if (std::regex_search(line, m, step_words)) {
    const int64_t step = std::stoll(m[1]);
    if (!first_step_at_) {
      first_step_at_ = at;
      first_step_ = step;
    }
    last_step_ = step;
    return;
  }
  RoundFault fault;
  fault.words = clipped(line);
  fault.seen_at = at;
  if (std::regex_search(line, m, silent_words)) {
    fault.kind = FaultKind::silent;
    fault.rank = std::stoi(m[1]);
    fault.host = m[2];
    fault.silent_s = std::stod(m[3]);
    fault.after_stop = line.find(", this rank stopping on ") != std::string::npos;
  } else if (std::regex_search(line, m, stuck_words)) {
    fault.kind = FaultKind::stuck;
    fault.rank = std::stoi(m[1]);
    fault.host = m[2];
    fault.stuck_s = std::stod(m[3]);
  } else if (std::regex_search(line, m, mpirun_signal)) {
    fault.kind = FaultKind::killed;
    fault.rank = std::stoi(m[1]);
    fault.host = m[2];
    fault.signal = std::stoi(m[3]);
    fault.signal_name = m[4];
  } else if (std::regex_search(line, m, srun_signal)) {
    fault.kind = FaultKind::killed;
    fault.host = m[1];
    fault.rank = std::stoi(m[2]);
    fault.signal_name = m[3];
    fault.signal = signal_number(fault.signal_name);
  } else if (std::regex_search(line, m, mpirun_lost) || std::regex_search(line, m, srun_node)) {
    fault.kind = FaultKind::lost;
    fault.host = m[1];
  } else if (std::regex_search(line, m, mpirun_status)) {
    fault.kind = FaultKind::exited;
    fault.rank = std::stoi(m[1]);
    fault.host = m[2];
    fault.exit_code = std::stoi(m[3]);
  } else if (std::regex_search(line, m, srun_exit)) {
    fault.kind = FaultKind::exited;
    fault.host = m[1];
    fault.rank = std::stoi(m[2]);
    fault.exit_code = std::stoi(m[3]);
  } else {
    return;
  }
  offer(std::move(fault));
}

}  // namespace sluice::supervisor
