#pragma once
// One round of a supervised job as a child process: started with its stdout and stderr on two
// pipes, every line passed on to this process's stdout/stderr as it comes and handed to a callback
// with the time it was read. SIGTERM, SIGUSR1 and SIGINT sent to this process go on to the child
// (mpirun and srun forward them to the ranks) and are remembered: a stopped job is not restarted.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace sluice::supervisor {

// Installs the forwarding handlers (once per process).
void forward_stop_signals();
// The stop signal this process received, 0 when none.
int received_stop_signal();

// Runs `argv` (argv[0] looked up on PATH) to its end; `on_line` sees each line (no newline) of
// either stream. Returns its exit code: 128 + N when killed by signal N, 127 when it could not be
// started. Returns once the child has exited and its pipes are drained (or 5 s after its exit,
// when a grandchild still holds them).
int run_round(const std::vector<std::string>& argv,
              const std::function<void(const std::string&, std::chrono::system_clock::time_point)>& on_line);

}  // namespace sluice::supervisor
