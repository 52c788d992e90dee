#include "util/net.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(ResolveIpv4, AnAddressIsItselfANameIsLookedUpAndANameThatIsNotIsNamed) {
  EXPECT_EQ(resolveIpv4("10.77.0.12", Millis(0)).value_or(""), "10.77.0.12");
  EXPECT_EQ(resolveIpv4("localhost", Millis(1000)).value_or(""), "127.0.0.1");
  auto none = resolveIpv4("no-such-host.invalid", Millis(0));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, Code::kUnavailable);
  EXPECT_EQ(none.error().message.rfind("'no-such-host.invalid' does not resolve", 0), 0u)
      << none.error().message;
}

}  // namespace
}  // namespace cohort
