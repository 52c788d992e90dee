// Strangers: the connections to a coordinator that have not yet proved they know the job's
// secret (channel.h's handshake). Anyone who reaches the coordinator's port can open them, so
// they are bounded in number and in time: at most `capacity` at once (a newcomer past it pushes
// out the oldest, one that has not said hello first) and none older than `deadline`. This
// decides which to close; the coordinator closes them. A connection the coordinator made
// itself (a socket pair to an agent it forked) is not a stranger and is never counted.
// Not thread-safe: the coordinator's loop thread owns it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <vector>

#include "util/text.h"

namespace cohort::agent {

class Strangers {
 public:
  using Clock = std::chrono::steady_clock;

  // A legitimate agent says hello at once and proves the secret one round trip later.
  static constexpr Millis kDeadline{10000};
  // What a job's agents need at once (they all connect as the job starts), with room for
  // strangers beside them: at least 128, or twice the job's nodes.
  static size_t capacityFor(size_t nodes) { return nodes * 2 > 128 ? nodes * 2 : 128; }

  Strangers(size_t capacity, Millis deadline) : capacity_(capacity), deadline_(deadline) {}

  // Connection `id` was accepted at `now`. Returns those to close to make room for it (at most
  // one): the oldest that has not said hello, else the oldest.
  std::vector<uint64_t> admit(uint64_t id, Clock::time_point now);
  // It said a well-formed hello: the last to go when room is needed.
  void saidHello(uint64_t id);
  // It proved the secret, or was closed: it is no stranger any more.
  void forget(uint64_t id);
  // Those past their deadline at `now`, forgotten: the caller closes them.
  std::vector<uint64_t> expired(Clock::time_point now);
  // When the oldest one's deadline comes; none when there is no stranger.
  std::optional<Clock::time_point> nextDeadline() const;
  size_t size() const { return by_id_.size(); }

 private:
  struct Entry {
    uint64_t id;
    Clock::time_point deadline;
  };
  // In the order they came (so their deadlines too): those that said nothing, those that said
  // hello.
  using List = std::list<Entry>;
  List silent_, greeted_;
  std::map<uint64_t, std::pair<List*, List::iterator>> by_id_;
  size_t capacity_;
  Millis deadline_;
};

}  // namespace cohort::agent
