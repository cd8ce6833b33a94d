// A backend's only public header is its factory: the public transport headers include no CUDA,
// NCCL or private transport header (each also compiles alone: header_check/ in the build).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace {

TEST(FeedPublicHeaders, ExposeNoBackendInternals) {
  std::istringstream headers(SLUICE_PUBLIC_HEADERS);
  std::string header;
  int checked = 0;
  while (std::getline(headers, header, ',')) {
    std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/runtime/transport/" + header);
    ASSERT_TRUE(in) << header;
    std::stringstream text;
    text << in.rdbuf();
    for (const char* forbidden : {"#include <cuda", "#include <nccl", "#include <mpi.h>", "channel_support.h",
                                  "mpi_feed.h", "slot_pair.h", "cuda_support.h", "cudaStream_t", "ncclComm_t"}) {
      EXPECT_EQ(text.str().find(forbidden), std::string::npos) << header << ": " << forbidden;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

}  // namespace
