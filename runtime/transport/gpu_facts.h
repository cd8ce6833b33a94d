#pragma once
// The GPUs this process can see, through the CUDA runtime and NCCL this build links (compiled
// with SLUICE_HAVE_CUDA / SLUICE_HAVE_NCCL, see CMakeLists.txt). No CUDA header here.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice::transport {

struct GpuFacts {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  std::string pci_bus_id;  // e.g. "0000:3B:00.0"
  int compute_major = 0, compute_minor = 0;
};

struct GpuEnvironment {
  bool cuda_compiled = false;  // this build has the CUDA transports (cuda_ipc)
  bool nccl_compiled = false;  // this build has the nccl transport
  std::string driver_version;   // CUDA version the driver supports, e.g. "13.0"; "" when no driver
  std::string driver_release;   // the NVIDIA kernel module's version, e.g. "580.65.06" (/proc/driver/nvidia/version); "" when absent
  std::string runtime_version;  // CUDA runtime linked, e.g. "13.0"; "" when not compiled
  std::string nccl_version;     // e.g. "2.28.3"; "" when not compiled
  std::string problem;          // why no device is visible when the runtime says so (cudaGetDeviceCount's error)
  std::vector<GpuFacts> gpus;   // empty: none visible
};

// Never throws: CUDA errors (no driver, no device) end up in `problem` with an empty `gpus`.
GpuEnvironment gpu_environment();

// The driver release in the first line of /proc/driver/nvidia/version: the first word after "Kernel
// Module" made of digits and dots ("580.65.06"; the open module's line says "Open Kernel Module for
// x86_64  580.159.04"); "" when there is none.
std::string nvidia_driver_release(const std::string& version_line);

}  // namespace sluice::transport
