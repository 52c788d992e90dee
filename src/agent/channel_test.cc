#include "agent/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

// A channel over one end of a socket pair; the test writes raw bytes into the other end.
struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    ours = std::make_unique<Channel>(UniqueFd(fds[0]), 64 * 1024);
    theirs.reset(fds[1]);
  }
  void send(const std::string& bytes) {
    ASSERT_EQ(::write(theirs.get(), bytes.data(), bytes.size()),
              static_cast<ssize_t>(bytes.size()));
  }
  std::unique_ptr<Channel> ours;
  UniqueFd theirs;
};

// Anyone on the machine can connect to a coordinator: what it sends before its hello is checked
// must never throw on the loop thread or recurse without a bound.
TEST(Channel, AStrangersWrongTypesDeepNestingAndFloodAreErrorsNotCrashes) {
  {
    Pair p;
    p.send(R"({"type":"hello","node":"x","secret":7})" "\n");
    auto m = p.ours->receive();
    ASSERT_TRUE(m);
    ASSERT_EQ(m->size(), 1u);
    EXPECT_EQ(field((*m)[0], "node", -1), -1);
    EXPECT_EQ(field((*m)[0], "secret", std::string()), "");
    EXPECT_EQ(field((*m)[0], "type", std::string()), "hello");
  }
  {
    Pair p;
    p.send(std::string(20000, '[') + "\n");
    auto m = p.ours->receive();
    ASSERT_FALSE(m);
    EXPECT_NE(m.error().message.find("nested too deep"), std::string::npos);
  }
  {
    Pair p;
    std::string flood(70 * 1024, 'x');  // no newline: never a complete message
    p.send(flood);
    auto m = p.ours->receive();
    EXPECT_FALSE(m) << "a stranger's unending line is refused once past the limit";
  }
}

}  // namespace
}  // namespace cohort::agent
