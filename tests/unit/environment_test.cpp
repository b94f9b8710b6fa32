// White-box: the environment table (src/core/support/environment.hpp): one parser per kind of
// value, and a bad value refused with an error that names the variable, the value and the rule.
#include "core/support/environment.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "streampool/error.hpp"

namespace env = streampool::detail::environment;
using env::variable;

namespace {

/// Sets a variable for one test and restores it after.
class scoped_env {
 public:
  scoped_env(variable v, const char* value) : name_(env::name(v)) {
    if (const char* old = std::getenv(name_)) old_ = old;
    if (value != nullptr) {
      setenv(name_, value, 1);
    } else {
      unsetenv(name_);
    }
  }
  ~scoped_env() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::string old_;
};

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const streampool::logic_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Environment, EveryVariableHasItsName) {
  EXPECT_STREQ(env::name(variable::memory_limit), "STREAMPOOL_MEMORY_LIMIT");
  EXPECT_STREQ(env::name(variable::torch_trace), "STREAMPOOL_TORCH_TRACE");
}

TEST(Environment, UnsetAndEmptyMeanTheDefault) {
  {
    const scoped_env unset(variable::cuda_ipc, nullptr);
    EXPECT_TRUE(env::flag(variable::cuda_ipc, true));
    EXPECT_FALSE(env::text(variable::cuda_ipc).has_value());
  }
  const scoped_env empty(variable::cuda_ipc, "");
  EXPECT_FALSE(env::flag(variable::cuda_ipc, false));
  EXPECT_EQ(env::power_of_two_bytes(variable::cuda_vm_granularity, 8u << 20, 2u << 20), 8u << 20);
}

TEST(Environment, SwitchesReadEveryWordInAnyCase) {
  for (const char* on : {"1", "true", "ON", "Yes"}) {
    const scoped_env e(variable::biased_locks, on);
    EXPECT_TRUE(env::flag(variable::biased_locks, false)) << on;
  }
  for (const char* off : {"0", "False", "off", "NO"}) {
    const scoped_env e(variable::biased_locks, off);
    EXPECT_FALSE(env::flag(variable::biased_locks, true)) << off;
  }
}

TEST(Environment, ABadSwitchNamesTheVariableAndTheValue) {
  const scoped_env e(variable::torch_per_stream, "maybe");
  const std::string why = error_of([] { (void)env::flag(variable::torch_per_stream, true); });
  EXPECT_NE(why.find("STREAMPOOL_TORCH_PER_STREAM=\"maybe\""), std::string::npos) << why;
  EXPECT_NE(why.find("1, true, on, yes, 0, false, off, no"), std::string::npos) << why;
}

TEST(Environment, SizesArePowersOfTwoAboveTheMinimum) {
  {
    const scoped_env e(variable::cuda_vm_granularity, "0x1000000");
    EXPECT_EQ(env::power_of_two_bytes(variable::cuda_vm_granularity, 0, 2u << 20), 16u << 20);
  }
  for (const char* bad : {"3145728", "1048576", "16M", "-8", "lots"}) {
    const scoped_env e(variable::cuda_vm_granularity, bad);
    const std::string why =
        error_of([] { (void)env::power_of_two_bytes(variable::cuda_vm_granularity, 0, 2u << 20); });
    EXPECT_NE(why.find(std::string("STREAMPOOL_CUDA_VM_GRANULARITY=\"") + bad + "\""),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("power of two of at least 2097152 bytes"), std::string::npos) << why;
  }
}

TEST(Environment, TheMemoryLimitReadsItsFormsAndNamesItself) {
  {
    const scoped_env e(variable::memory_limit, "50%");
    EXPECT_EQ(env::memory_limit(1000), 500u);
  }
  {
    const scoped_env e(variable::memory_limit, nullptr);
    EXPECT_EQ(env::memory_limit(1000), 0u);
  }
  const scoped_env e(variable::memory_limit, "twelve");
  const std::string why = error_of([] { (void)env::memory_limit(1000); });
  EXPECT_NE(why.find("STREAMPOOL_MEMORY_LIMIT=\"twelve\""), std::string::npos) << why;
}
