#include "agent/strangers.h"

#include <algorithm>

namespace cohort::agent {

std::vector<uint64_t> Strangers::admit(uint64_t id, Clock::time_point now) {
  std::vector<uint64_t> out;
  if (by_id_.size() >= capacity_) {
    List& from = silent_.empty() ? greeted_ : silent_;
    if (!from.empty()) {
      out.push_back(from.front().id);
      forget(from.front().id);
    }
  }
  silent_.push_back({id, now + deadline_});
  by_id_[id] = {&silent_, std::prev(silent_.end())};
  return out;
}

void Strangers::saidHello(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.first == &greeted_) return;
  const Entry entry = *it->second.second;
  silent_.erase(it->second.second);
  // Keep greeted_ in deadline order: it came later than some already there, maybe.
  auto at = std::find_if(greeted_.rbegin(), greeted_.rend(),
                         [&](const Entry& e) { return e.deadline <= entry.deadline; });
  auto placed = greeted_.insert(at.base(), entry);
  it->second = {&greeted_, placed};
}

void Strangers::forget(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  it->second.first->erase(it->second.second);
  by_id_.erase(it);
}

std::vector<uint64_t> Strangers::expired(Clock::time_point now) {
  std::vector<uint64_t> out;
  for (List* list : {&silent_, &greeted_}) {
    while (!list->empty() && list->front().deadline <= now) {
      const uint64_t id = list->front().id;
      out.push_back(id);
      forget(id);
    }
  }
  return out;
}

std::optional<Strangers::Clock::time_point> Strangers::nextDeadline() const {
  std::optional<Clock::time_point> next;
  for (const List* list : {&silent_, &greeted_}) {
    if (!list->empty() && (!next || list->front().deadline < *next)) next = list->front().deadline;
  }
  return next;
}

}  // namespace cohort::agent
