// The control channel's codec: every message survives encode and decode, and what a peer (or a
// stranger, before it proved the secret) sends wrongly is an error naming the message and the
// field, never a throw or a default taken in silence.
#include "agent/protocol.h"

#include <gtest/gtest.h>

namespace cohort::agent::protocol {
namespace {

template <class T>
T roundTripToCoordinator(const T& message) {
  auto decoded = decodeToCoordinator(encode(ToCoordinator{message}));
  EXPECT_TRUE(decoded) << decoded.error().message;
  EXPECT_TRUE(decoded && std::holds_alternative<T>(*decoded));
  return decoded && std::holds_alternative<T>(*decoded) ? std::get<T>(*decoded) : T{};
}

template <class T>
T roundTripToAgent(const T& message) {
  auto decoded = decodeToAgent(encode(ToAgent{message}));
  EXPECT_TRUE(decoded) << decoded.error().message;
  EXPECT_TRUE(decoded && std::holds_alternative<T>(*decoded));
  return decoded && std::holds_alternative<T>(*decoded) ? std::get<T>(*decoded) : T{};
}

TEST(Protocol, EveryAgentMessageSurvivesTheCodec) {
  Hello hello{3, std::string(32, 'a'), 42, "10.0.0.3", "eth0", "n3"};
  Hello h = roundTripToCoordinator(hello);
  EXPECT_EQ((std::tuple{h.node, h.nonce, h.pid, h.host, h.interface, h.hostname}),
            (std::tuple{3, std::string(32, 'a'), 42, std::string("10.0.0.3"),
                        std::string("eth0"), std::string("n3")}));
  Exited exited;
  exited.attempt = 1;
  exited.rank = 7;
  exited.code = 0;
  exited.signal = 15;
  exited.by_cohort = true;
  exited.stopped_by = "agent";
  exited.stop_reason = "it lost its coordinator";
  exited.time = 123;
  exited.tail = {"a", "b"};
  exited.memory_limit = 1 << 20;
  Exited e = roundTripToCoordinator(exited);
  EXPECT_EQ(e.rank, 7);
  EXPECT_EQ(e.signal, 15);
  EXPECT_TRUE(e.by_cohort);
  EXPECT_EQ(e.stopped_by, "agent");
  EXPECT_EQ(e.stop_reason, "it lost its coordinator");
  EXPECT_EQ(e.tail, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(e.memory_limit, 1 << 20);
  Progress progress{2, 99, {}};
  RankProgress rp;
  rp.index = 1;
  rp.running = true;
  rp.last_output = 5;
  rp.last_heartbeat = 6;
  rp.cpu_seconds = 1.5;
  rp.rss_bytes = 1024;
  rp.gpu_util = 40;
  rp.gpu_memory_bytes = 2048;
  progress.ranks.push_back(rp);
  Progress p = roundTripToCoordinator(progress);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].last_heartbeat, 6);
  EXPECT_EQ(p.ranks[0].cpu_seconds, std::optional<double>(1.5));
  EXPECT_EQ(p.ranks[0].gpu_memory_bytes, 2048);
  Stacks stacks{3, {RankStack{0, "S", "Thread 1 ...", ""}, RankStack{1, "T", "", "no process"}}};
  Stacks s = roundTripToCoordinator(stacks);
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(s.ranks[1].error, "no process");
  OutputsCopied copied{{OutputCopied{2, 10, ""}, OutputCopied{0, 0, "disk full"}}};
  OutputsCopied c = roundTripToCoordinator(copied);
  ASSERT_EQ(c.results.size(), 2u);
  EXPECT_EQ(c.results[0].bytes, 10);
  EXPECT_EQ(c.results[1].error, "disk full");
  EXPECT_EQ(roundTripToCoordinator(Staged{3, 4, 0.5, true}).own_dir, true);
  EXPECT_EQ(roundTripToCoordinator(Started{1, 8, 7}).count, 8);
  EXPECT_EQ(roundTripToCoordinator(Idle{4, 1}).attempt, 4);
  EXPECT_EQ(roundTripToCoordinator(Signalled{15}).signal, 15);
  EXPECT_EQ(roundTripToCoordinator(Limits{"no cgroup"}).why, "no cgroup");
  EXPECT_EQ(roundTripToCoordinator(Debug{0, 1, "waiting", "start", "x.py:3", 9}).where, "x.py:3");
  EXPECT_EQ(roundTripToCoordinator(StageFailed{"gone"}).error, "gone");
  EXPECT_EQ(roundTripToCoordinator(Auth{"p"}).proof, "p");
  roundTripToCoordinator(Heartbeat{});
}

TEST(Protocol, EveryCoordinatorMessageSurvivesTheCodec) {
  EXPECT_EQ(roundTripToAgent(Challenge{"n", "p", 77}).pid, 77);
  EXPECT_EQ(roundTripToAgent(Start{2}).attempt, 2);
  Stop stop = roundTripToAgent(Stop{0, 10, 3});
  EXPECT_EQ(stop.signal, 10);
  EXPECT_EQ(stop.exit, std::optional<int>(3));
  EXPECT_FALSE(roundTripToAgent(Stop{5, 15, std::nullopt}).exit);
  Exit exit = roundTripToAgent(Exit{1, {plan::OutputPlan{"/j/output", "/t", false}}});
  ASSERT_EQ(exit.outputs.size(), 1u);
  EXPECT_EQ(exit.outputs[0].target, "/t");
  Files files = roundTripToAgent(Files{{plan::GeneratedFile{"/j/files/x", "content"}}});
  ASSERT_EQ(files.files.size(), 1u);
  EXPECT_EQ(files.files[0].content, "content");
  PlanMessage plan;
  plan.node.node = 1;
  plan.workdir = "/w";
  plan.job_dir = "/j";
  plan.mark = "m";
  plan.heartbeat_ms = 3000;
  plan.heartbeat_timeout_ms = 30000;
  plan.stop_signal = 10;
  plan.grace_ms = 2000;
  PlanMessage back = roundTripToAgent(plan);
  EXPECT_EQ(back.node.node, 1);
  EXPECT_EQ(back.workdir, "/w");
  EXPECT_EQ(back.heartbeat_timeout_ms, 30000);
  EXPECT_EQ(back.stop_signal, 10);
  roundTripToAgent(Stage{});
  roundTripToAgent(StacksRequest{});
  roundTripToAgent(Heartbeat{});
}

// What an honest peer sends is never refused for its size: a rank's very long last line goes cut.
TEST(Protocol, WhatIsSentIsHeldToWhatIsTaken) {
  Exited exited;
  exited.rank = 0;
  exited.tail = {std::string(10000, 'x'), "short"};
  exited.error = std::string(9000, 'e');
  Exited e = roundTripToCoordinator(exited);
  ASSERT_EQ(e.tail.size(), 2u);
  EXPECT_EQ(e.tail[0].size(), 4096u);
  EXPECT_EQ(e.tail[1], "short");
  EXPECT_EQ(e.error.size(), 4096u);
  EXPECT_EQ(roundTripToCoordinator(StageFailed{std::string(5000, 'z')}).error.size(), 4096u);
}

std::string errorOf(const Message& m) {
  auto d = decodeToCoordinator(m);
  return d ? "" : d.error().message;
}

TEST(Protocol, WrongMessagesAreErrorsNamingTheMessageAndTheField) {
  EXPECT_EQ(errorOf(Message::array()), "control channel: a message: not a JSON object");
  EXPECT_EQ(errorOf({{"node", 1}}), "control channel: a message: 'type' is missing");
  EXPECT_EQ(errorOf({{"type", "exited"}, {"attempt", 0}, {"rank", 1}, {"code", "1"}}),
            "control channel: 'exited': 'code' must be an integer");
  EXPECT_EQ(errorOf({{"type", "exited"}, {"attempt", 0}}),
            "control channel: 'exited': 'rank' is missing");
  EXPECT_EQ(errorOf({{"type", "exited"}, {"attempt", 0}, {"rank", 1}, {"stopped_by", "rank"}}),
            "control channel: 'exited': 'stopped_by' must be coordinator or agent");
  EXPECT_EQ(errorOf({{"type", "exited"}, {"attempt", 0}, {"rank", 1}, {"tail", {1, 2}}}),
            "control channel: 'exited': 'tail' must be a list of strings of at most 4096 bytes");
  EXPECT_EQ(errorOf({{"type", "hello"}, {"node", 1e40}, {"nonce", "x"}}),
            "control channel: 'hello': 'node' must be an integer");
  EXPECT_EQ(errorOf({{"type", "progress"}, {"attempt", 0}, {"ranks", {{{"index", "x"}}}}}),
            "control channel: 'progress': 'ranks' has an item whose 'index' must be an integer");
  EXPECT_EQ(errorOf({{"type", "stage_failed"}, {"error", std::string(5000, 'x')}}),
            "control channel: 'stage_failed': 'error' is longer than 4096 bytes");
  EXPECT_EQ(errorOf({{"type", "start"}, {"attempt", 1}}),
            "control channel: 'start': not a message an agent sends");
  auto d = decodeToAgent({{"type", "stop"}, {"grace_ms", -1}});
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, "control channel: 'stop': 'grace_ms' must not be negative");
  d = decodeToAgent({{"type", "hello"}, {"node", 0}, {"nonce", "x"}});
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().message, "control channel: 'hello': not a message a coordinator sends");
}

}  // namespace
}  // namespace cohort::agent::protocol
