// machine_refusal (common/error.h): memory or a thread the machine would not give is an
// EnvironmentError (exit 5) that says what to check; anything else stays what it was.
#include <cerrno>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

#include "common/error.h"

namespace sluice {
namespace {

TEST(MachineRefusal, AnAllocationRefusedIsOutOfMemoryWithTheLimitsToCheck) {
  const auto refusal = machine_refusal(std::bad_alloc());
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->kind(), ErrorKind::environment);
  const std::string said = refusal->what();
  EXPECT_EQ(said.rfind("out of memory: an allocation was refused (", 0), 0u) << said;
  EXPECT_NE(said.find("`ulimit -v`"), std::string::npos) << said;
  EXPECT_NE(said.find("Slurm --mem"), std::string::npos) << said;
  EXPECT_NE(said.find("prep.threads"), std::string::npos) << said;
}

TEST(MachineRefusal, AThreadThatCouldNotStartIsTheMachinesRefusal) {
  for (const int code : {EAGAIN, ENOMEM}) {
    const auto refusal = machine_refusal(std::system_error(code, std::generic_category(), "thread"));
    ASSERT_TRUE(refusal.has_value()) << code;
    EXPECT_EQ(refusal->kind(), ErrorKind::environment);
    EXPECT_NE(std::string(refusal->what()).find("a thread or its memory was refused"), std::string::npos);
  }
}

TEST(MachineRefusal, OtherFailuresAreNotTheMachines) {
  EXPECT_FALSE(machine_refusal(std::runtime_error("a bug")).has_value());
  EXPECT_FALSE(machine_refusal(std::system_error(EINVAL, std::generic_category(), "bad argument")).has_value());
  EXPECT_FALSE(machine_refusal(std::out_of_range("index")).has_value());
}

}  // namespace
}  // namespace sluice
