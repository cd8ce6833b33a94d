#include "runtime/transport/gpu_facts.h"

#include <cctype>
#include <fstream>
#include <sstream>

#if SLUICE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

namespace sluice::transport {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
[[maybe_unused]] std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string installed_driver_release() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  return std::getline(in, line) ? nvidia_driver_release(line) : "";
}

}  // namespace

std::string nvidia_driver_release(const std::string& version_line) {
  const size_t module = version_line.find("Kernel Module");
  if (module == std::string::npos) return "";
  std::istringstream words(version_line.substr(module + 13));
  for (std::string word; words >> word;) {
    const bool version = std::isdigit(static_cast<unsigned char>(word.front())) &&
                         word.find_first_not_of("0123456789.") == std::string::npos && word.find('.') != std::string::npos;
    if (version) return word;
  }
  return "";
}

GpuEnvironment gpu_environment() {
  GpuEnvironment env;
  env.driver_release = installed_driver_release();
  env.cuda_compiled = SLUICE_HAVE_CUDA != 0;
  env.nccl_compiled = SLUICE_HAVE_NCCL != 0;
#if SLUICE_HAVE_NCCL
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9: major * 10000 + minor * 100 + patch.
    env.nccl_version = std::to_string(nccl / 10000) + "." + std::to_string((nccl % 10000) / 100) + "." +
                       std::to_string(nccl % 100);
  }
#endif
#if SLUICE_HAVE_CUDA
  int version = 0;
  if (cudaRuntimeGetVersion(&version) == cudaSuccess) env.runtime_version = cuda_version_string(version);
  if (cudaDriverGetVersion(&version) == cudaSuccess && version > 0) env.driver_version = cuda_version_string(version);
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    env.problem = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
    (void)cudaGetLastError();
    return env;
  }
  for (int device = 0; device < count; ++device) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) continue;
    GpuFacts gpu;
    gpu.index = device;
    gpu.name = properties.name;
    gpu.memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
    gpu.compute_major = properties.major;
    gpu.compute_minor = properties.minor;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess) gpu.pci_bus_id = bus;
    env.gpus.push_back(gpu);
  }
#else
  env.problem = "this build has no CUDA (SLUICE_CUDA was OFF or no CUDA toolkit was found)";
#endif
  return env;
}

}  // namespace sluice::transport
