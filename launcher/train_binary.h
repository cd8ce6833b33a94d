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

// The C allocator sluice-train runs with, chosen by SLUICE_MALLOC before the exec:
//   tcmalloc (the default)  Debian's libtcmalloc-minimal4, preloaded (LD_PRELOAD) when installed;
//                           without it, the C library's malloc, and the log says so (debug)
//   system                  the C library's malloc (glibc)
// Why tcmalloc: a CPU model rank frees and reallocates its activations every step; glibc's
// dynamic mmap threshold moves those tensors between mmap and its heap, and its peak RSS stepped
// up ~5% in an hour without any growth behind it, while with tcmalloc it stayed within 2.4% over
// an hour of 3x the steps, 12% lower, with steps 0.88x glibc's (docs/performance.md, "Memory over
// an hour"). A library the user preloads already (LD_PRELOAD naming a malloc) is left alone.
// sluice-train reports what it really loaded (common/host.h, allocator_in_use), with the reason
// given here in SLUICE_MALLOC_CHOSEN.

// Replaces this process with sluice-train, same argv and environment (plus the allocator's
// LD_PRELOAD). Returns only when that failed: then it has logged what was looked for and why it
// failed, and returns exit code 1 (2 for a bad SLUICE_MALLOC, 5 for a `ulimit -v` below what
// training needs: checked here, as tcmalloc would spin on it before sluice-train's main). Call before MPI_Init and before
// any thread is started.
int exec_train_binary(int argc, char** argv);

}  // namespace sluice::launcher
