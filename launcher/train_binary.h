#pragma once
// How `sluice` hands a command that needs libtorch to `sluice-train` (launch.h says why).
//
// Where sluice-train is looked for, in order: next to the running executable (/proc/self/exe:
// the build tree, build/launcher/), then the install layout's PREFIX/libexec/sluice/sluice-train
// relative to PREFIX/bin/sluice (SLUICE_TRAIN_FROM_BINDIR, set by launcher/CMakeLists.txt from
// GNUInstallDirs). Symbolic links to `sluice` are followed first, so a link in ~/bin works.
#include <filesystem>
#include <vector>

namespace sluice::launcher {

// Whether the command line chooses a command that only sluice-train has: its first argument that
// is not an option is `train`, `doctor` or `bench` (sluice's only top-level options are flags,
// --help and --version, so that argument is the command).
bool needs_torch(int argc, char** argv);

// The places sluice-train is looked for, in order, for the executable at `self`.
std::vector<std::filesystem::path> train_binary_candidates(const std::filesystem::path& self);

// Replaces this process with sluice-train, same argv and environment. Returns only when that
// failed: then it has logged what was looked for and why it failed, and returns exit code 1.
// Call before MPI_Init and before any thread is started.
int exec_train_binary(int argc, char** argv);

}  // namespace sluice::launcher
