// The public cache headers carry no HDF5: this file is compiled with HDF5's include directory
// absent (sluice_cache links HDF5 PRIVATE), and each header is also compiled alone by the
// sluice_cache_header_check target (CMakeLists.txt next to this file).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace {

TEST(CachePublicHeaders, IncludeNoHdf5) {
  for (const char* header : {"cache_reader.h", "cache_index.h", "manifest.h", "shard_writer.h",
                             "shard_reader.h", "cache_verifier.h", "cache_inspector.h",
                             "mel_statistics.h"}) {
    std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/cache/" + header);
    ASSERT_TRUE(in) << header;
    std::stringstream text;
    text << in.rdbuf();
    for (const char* forbidden :
         {"#include <hdf5", "#include <H5", "#include \"cache/hdf5_handle.h\"",
          "#include \"cache/shard_layout.h\"", "hid_t", "hsize_t"}) {
      EXPECT_EQ(text.str().find(forbidden), std::string::npos) << header << ": " << forbidden;
    }
  }
}

}  // namespace
