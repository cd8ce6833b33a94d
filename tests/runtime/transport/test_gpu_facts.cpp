// What `sluice doctor` reads of the NVIDIA driver: its release from /proc/driver/nvidia/version's
// first line, in the proprietary module's words and in the open module's (the H100 host's, whose
// doctor line once read "NVIDIA driver  for (supports CUDA 13.0)").
#include <gtest/gtest.h>

#include "runtime/transport/gpu_facts.h"

namespace sluice::transport {
namespace {

TEST(GpuFacts, DriverReleaseFromEitherKernelModulesVersionLine) {
  EXPECT_EQ(nvidia_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025"),
            "580.65.06");
  EXPECT_EQ(nvidia_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
                                  "(dvs-builder@U22-I3-AM02-24-3)  Wed Oct 29 2025"),
            "580.159.04");
  EXPECT_EQ(nvidia_driver_release("NVRM version: something else entirely"), "");
  EXPECT_EQ(nvidia_driver_release(""), "");
}

}  // namespace
}  // namespace sluice::transport
