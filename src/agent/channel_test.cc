#include "agent/channel.h"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

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

// A rank's last lines travel in messages and may be any bytes.
TEST(Channel, InvalidUtf8InAStringIsSentReplacedNotThrown) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  Channel from{UniqueFd(fds[0])};
  Channel to{UniqueFd(fds[1])};
  ASSERT_TRUE(from.send({{"tail", {std::string("a\xff\xfe b")}}}));
  auto m = to.receive();
  ASSERT_TRUE(m);
  ASSERT_EQ(m->size(), 1u);
  EXPECT_EQ((*m)[0]["tail"][0], "a\xef\xbf\xbd\xef\xbf\xbd b");
}

TEST(Channel, LogFramesCarryAnyBytesAcrossSplitReads) {
  Pair p;
  std::string bytes("a\0\xff\n\xfe", 5);
  std::string frame = "=3 5\n" + bytes + R"({"type":"idle"})" "\n";
  // Byte by byte: a frame whose bytes have not all come yet is not a message yet.
  std::vector<Message> got;
  for (char c : frame) {
    p.send(std::string(1, c));
    auto m = p.ours->receive();
    ASSERT_TRUE(m) << m.error().message;
    for (Message& one : *m) got.push_back(std::move(one));
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(field(got[0], "type", std::string()), "log");
  EXPECT_EQ(field(got[0], "index", -1), 3);
  ASSERT_TRUE(got[0]["data"].is_binary());
  const auto& data = got[0]["data"].get_binary();
  EXPECT_EQ(std::string(data.begin(), data.end()), bytes);
  EXPECT_EQ(field(got[1], "type", std::string()), "idle");
}

TEST(Channel, ABadLogFrameIsAnError) {
  for (const std::string& bad :
       std::vector<std::string>{"=x 5\n", "=1\n", "=-1 2\n", "=1 99999999999\n",
                                "=1 " + std::string(100, '1')}) {
    Pair p;
    p.send(bad);
    EXPECT_FALSE(p.ours->receive()) << bad;
  }
}

TEST(Channel, SendLogSplitsLargeOutputIntoFrames) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  Channel from{UniqueFd(fds[0])};
  Channel to{UniqueFd(fds[1])};
  std::string big(Channel::kMaxLogFrame + 10, 'x');
  std::thread sender([&] {
    ASSERT_TRUE(from.sendLog(0, big));
    ASSERT_TRUE(from.drain(Millis(10000)));
  });
  std::string all;
  size_t frames = 0;
  while (all.size() < big.size()) {
    auto m = to.receive();
    ASSERT_TRUE(m) << m.error().message;
    for (const Message& one : *m) {
      const auto& data = one["data"].get_binary();
      all.append(data.begin(), data.end());
      ++frames;
    }
  }
  sender.join();
  EXPECT_EQ(all, big);
  EXPECT_EQ(frames, 2u);
}

// A peer that does not read (stopped, starved) never makes a send wait: what the socket does not
// take waits in the channel, in order, and no message is ever cut short; it goes when the socket
// takes it again (flush), and the owner is told when to watch for that.
TEST(Channel, APeerThatDoesNotReadNeverBlocksASendAndLosesNothing) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  Channel from{UniqueFd(fds[0])};
  Channel to{UniqueFd(fds[1])};
  std::vector<bool> pending_said;
  from.setOnPending([&](bool pending) { pending_said.push_back(pending); });
  const std::string line(100 * 1024, 'y');
  constexpr int kMessages = 200;  // 20 MiB: far more than a socket buffer holds
  // Nobody reads `to`: a send that waited for its peer would never return (the test's timeout),
  // one that dropped would lose what the loop below counts.
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(from.send({{"type", "output"}, {"i", i}, {"line", line}}));
  }
  EXPECT_GT(from.pendingBytes(), 0u) << "what the socket could not take waits in the channel";
  ASSERT_EQ(pending_said, std::vector<bool>{true});
  int next = 0;
  while (next < kMessages) {
    ASSERT_TRUE(from.flush());
    auto m = to.receive();
    ASSERT_TRUE(m) << m.error().message;
    for (const Message& one : *m) {
      ASSERT_EQ(field(one, "i", -1), next) << "in order, each whole";
      ASSERT_EQ(field(one, "line", std::string()), line);
      ++next;
    }
  }
  EXPECT_EQ(from.pendingBytes(), 0u);
  EXPECT_EQ(pending_said, (std::vector<bool>{true, false}));
}

TEST(Channel, ASendToAPeerThatIsGoneIsAnError) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  Channel from{UniqueFd(fds[0])};
  ::close(fds[1]);
  EXPECT_FALSE(from.send({{"type", "heartbeat"}}));
  EXPECT_FALSE(from.send({{"type", "heartbeat"}})) << "and stays one";
  EXPECT_FALSE(from.drain(Millis(100)) && from.pendingBytes() > 0);
}

TEST(Handshake, AProofIsHmacSha256AndBindsTheSideTheNonceAndTheNode) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(handshakeProof(secret, "agent", "n0nce", 1),
            "2312c438d78cefa7cc72acb28e205437e0e3c58d47c85365b3f480ac43f8cdca");
  const std::string proof = handshakeProof(secret, "agent", "n0nce", 1);
  EXPECT_NE(handshakeProof(secret, "coordinator", "n0nce", 1), proof);
  EXPECT_NE(handshakeProof(secret, "agent", "other", 1), proof);
  EXPECT_NE(handshakeProof(secret, "agent", "n0nce", 2), proof);
  EXPECT_NE(handshakeProof("another secret", "agent", "n0nce", 1), proof);
  EXPECT_EQ(proof.find(secret), std::string::npos);
}

}  // namespace
}  // namespace cohort::agent
