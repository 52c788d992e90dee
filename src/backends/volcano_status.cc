#include "backends/volcano_status.h"

#include <cctype>
#include <cstdlib>

namespace cohort::backends {

using Json = nlohmann::json;

namespace {

const Json& at(const Json& object, std::initializer_list<const char*> path) {
  return jsonAt(object, path);
}

std::string text(const Json& object, std::initializer_list<const char*> path) {
  const Json& j = at(object, path);
  return j.is_string() ? j.get<std::string>() : std::string();
}

// One line of at most 300 printable characters: what the cluster says goes to a terminal.
std::string words(std::string s) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '.')) s.pop_back();
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

// The condition of `type` among `conditions`, or null.
const Json* condition(const Json& conditions, const std::string& type) {
  if (!conditions.is_array()) return nullptr;
  for (const Json& c : conditions) {
    if (text(c, {"type"}) == type) return &c;
  }
  return nullptr;
}

const Json& firstContainer(const Json& pod) {
  static const Json kNull;
  const Json& statuses = at(pod, {"status", "containerStatuses"});
  return statuses.is_array() && !statuses.empty() ? statuses[0] : kNull;
}

bool isGangMessage(const std::string& message) {
  return message.find("tasks in gang unschedulable") != std::string::npos;
}

}  // namespace

const Json& jsonAt(const Json& object, std::initializer_list<const char*> path) {
  static const Json kNull;
  const Json* j = &object;
  for (const char* key : path) {
    if (!j->is_object()) return kNull;
    auto it = j->find(key);
    if (it == j->end()) return kNull;
    j = &*it;
  }
  return *j;
}

bool volcanoPhaseFinal(const std::string& phase) {
  return phase == "Completed" || phase == "Failed" || phase == "Aborted" || phase == "Terminated";
}

std::string gangWords(const std::string& message) {
  // "<unready>/<tasks> tasks in gang unschedulable: ...", unready = minAvailable - schedulable;
  // cohort's minAvailable is every pod.
  char* end = nullptr;
  const long unready = std::strtol(message.c_str(), &end, 10);
  if (end == message.c_str() || *end != '/') return "";
  const char* rest = end + 1;
  const long tasks = std::strtol(rest, &end, 10);
  if (end == rest || !isGangMessage(message) || unready < 0 || tasks <= 0 || unready > tasks) {
    return "";
  }
  return std::to_string(tasks - unready) + " of " + std::to_string(tasks) +
         " pods can be scheduled";
}

VolcanoView volcanoView(const Json& job, const Json& podgroup, const Json& pods,
                        const std::string& coordinator_pod) {
  VolcanoView v;
  v.phase = text(job, {"status", "state", "phase"});
  v.final = volcanoPhaseFinal(v.phase);

  std::string gang, fit, starting, pulling;
  if (const Json* c = condition(at(podgroup, {"status", "conditions"}), "Unschedulable");
      c && text(*c, {"status"}) == "True") {
    gang = gangWords(text(*c, {"message"}));
    if (gang.empty() && !text(*c, {"message"}).empty()) {
      fit = "Volcano says: " + words(text(*c, {"message"}));
    }
  }
  bool coordinator_seen = false;
  bool unbound = false;
  if (pods.is_array()) {
    for (const Json& pod : pods) {
      if (!pod.is_object()) continue;
      ++v.pods;
      const std::string name = text(pod, {"metadata", "name"});
      const std::string phase = text(pod, {"status", "phase"});
      const Json& container = firstContainer(pod);
      const Json& state = at(container, {"state"});
      if (name == coordinator_pod) {
        coordinator_seen = true;
        v.coordinator_uid = text(pod, {"metadata", "uid"});
        v.coordinator_started =
            at(state, {"running"}).is_object() || at(state, {"terminated"}).is_object();
        const Json& code = at(state, {"terminated", "exitCode"});
        if (code.is_number_integer()) {
          v.coordinator_exit = code.get<int>();
          v.coordinator_end =
              coordinatorEndWords(code.get<int>(), text(state, {"terminated", "reason"}),
                                  words(text(state, {"terminated", "message"})));
        }
        if (!v.coordinator_exit && phase == "Failed") {
          const std::string reason = text(pod, {"status", "reason"});
          v.coordinator_gone = "its pod " + name + " failed" +
                               (reason.empty() ? "" : " (" + reason + ")") +
                               (text(pod, {"status", "message"}).empty()
                                    ? ""
                                    : ": " + words(text(pod, {"status", "message"})));
        }
      }
      if (const Json* scheduled = condition(at(pod, {"status", "conditions"}), "PodScheduled");
          scheduled && text(*scheduled, {"status"}) == "False") {
        const std::string message = text(*scheduled, {"message"});
        if (isGangMessage(message)) {
          if (gang.empty()) gang = gangWords(message);
        } else if (fit.empty() && !message.empty() &&
                   text(*scheduled, {"reason"}) == "Unschedulable") {
          fit = name + ": " + words(message);
        }
        continue;
      }
      if (text(pod, {"spec", "nodeName"}).empty() && phase == "Pending") {
        unbound = true;  // Volcano's scheduler has not placed it yet, nor said why
        continue;
      }
      const std::string waiting = text(state, {"waiting", "reason"});
      const std::string said = words(text(state, {"waiting", "message"}));
      if (waiting == "InvalidImageName" || waiting == "ErrImageNeverPull" ||
          waiting == "CreateContainerConfigError" || waiting == "CreateContainerError") {
        if (v.broken.empty()) {
          v.broken =
              "pod " + name + " cannot start: " + waiting + (said.empty() ? "" : ": " + said);
        }
      } else if (waiting == "ErrImagePull" || waiting == "ImagePullBackOff") {
        if (pulling.empty()) {
          pulling = "pod " + name + ": its image " + text(container, {"image"}) +
                    " cannot be pulled (" + waiting + (said.empty() ? "" : ": " + said) + ")";
        }
      } else if (phase == "Pending" && starting.empty()) {
        starting =
            "starting the pods (" + (waiting.empty() ? std::string("scheduled") : waiting) + ")";
      }
    }
  }
  if (!coordinator_seen && v.final && v.coordinator_uid.empty()) {
    v.coordinator_gone = "its pod " + coordinator_pod + " is gone";
  }
  if (v.final || v.phase == "Running") return v;  // Running: every pod of the gang runs
  if (!gang.empty()) {
    v.waiting = "waiting for the gang: " + gang + (fit.empty() ? "" : " (" + fit + ")");
  } else if (!fit.empty()) {
    v.waiting = "waiting to be scheduled (" + fit + ")";
  } else if (!pulling.empty()) {
    v.waiting = pulling;
  } else if (unbound) {
    v.waiting = "waiting for Volcano's scheduler to place the pods";
  } else if (!starting.empty()) {
    v.waiting = starting;
  } else if (v.pods == 0) {
    const std::string pg_phase = text(podgroup, {"status", "phase"});
    v.waiting = v.phase.empty() ? "waiting for Volcano to take the Job (is its controller running?)"
                : pg_phase == "Pending" || pg_phase.empty()
                    ? "waiting for Volcano to admit the gang to its queue"
                    : "waiting for Volcano to make the pods";
  }
  return v;
}

std::string coordinatorEndWords(int exit_code, const std::string& reason,
                                const std::string& message) {
  std::string out = "its container ended with exit code " + std::to_string(exit_code);
  const std::string said = reason.empty() || reason == "Error" || reason == "Completed"
                               ? message
                               : reason + (message.empty() ? "" : ": " + message);
  if (!said.empty()) out += " (" + said.substr(0, 300) + ")";
  if (exit_code == 127) {
    out += ": its command was not found: the image needs `cohort` on its PATH (and what the "
           "job's command needs)";
  } else if (exit_code == 126) {
    out += ": its command could not be executed (not executable, or built for another machine)";
  } else if (exit_code == 137) {
    out += ": it was killed (SIGKILL: out of memory, or the pod was deleted)";
  }
  return out;
}

}  // namespace cohort::backends
