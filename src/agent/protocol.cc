#include "agent/protocol.h"

#include <limits>

#include "util/json_reader.h"

namespace cohort::agent::protocol {

namespace {

using Reader = JsonReader<Message>;

// Limits on what a message may carry: strings from ranks (their last lines, their stacks, their
// debugger's word) and lists as long as a node's ranks.
constexpr size_t kMaxString = 64 * 1024;     // a rank's stack (py-spy's dump is cut at 16 KiB)
constexpr size_t kMaxShort = 4096;           // errors, reasons, where, addresses
constexpr size_t kMaxItems = 65536;          // ranks of a node, files, tail lines, outputs
constexpr size_t kMaxTailLines = 1024;

// What is sent is held to what decode takes, so that an honest peer's message is never refused:
// a longer string goes cut (a rank's very long last line, say).
std::string cap(const std::string& text, size_t max = kMaxShort) {
  return text.size() <= max ? text : text.substr(0, max);
}

std::vector<std::string> capped(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size() && i < kMaxTailLines; ++i) out.push_back(cap(lines[i]));
  return out;
}

Message typed(const char* type, Message fields = Message::object()) {
  fields["type"] = type;
  return fields;
}

struct Encoder {
  Message operator()(const Heartbeat&) const { return typed("heartbeat"); }
  Message operator()(const Hello& m) const {
    return typed("hello", {{"node", m.node},
                                  {"nonce", cap(m.nonce)},
                                  {"pid", m.pid},
                                  {"host", cap(m.host)},
                                  {"interface", cap(m.interface)},
                                  {"hostname", cap(m.hostname)}});
  }
  Message operator()(const Auth& m) const { return typed("auth", {{"proof", m.proof}}); }
  Message operator()(const Staged& m) const {
    return typed("staged", {{"files", m.files},
                                    {"bytes", m.bytes},
                                    {"seconds", m.seconds},
                                    {"own_dir", m.own_dir}});
  }
  Message operator()(const StageFailed& m) const {
    return typed("stage_failed", {{"error", cap(m.error)}});
  }
  Message operator()(const Started& m) const {
    return typed("started", {{"attempt", m.attempt}, {"count", m.count}, {"time", m.time}});
  }
  Message operator()(const Exited& m) const {
    Message j = {{"attempt", m.attempt},         {"rank", m.rank},
                 {"code", m.code},               {"signal", m.signal},
                 {"by_cohort", m.by_cohort},     {"time", m.time},
                 {"tail", capped(m.tail)},       {"error", cap(m.error)},
                 {"memory_limit", m.memory_limit}};
    if (!m.stopped_by.empty()) {
      j["stopped_by"] = m.stopped_by;
      j["stop_reason"] = cap(m.stop_reason);
    }
    return typed("exited", std::move(j));
  }
  Message operator()(const Idle& m) const {
    return typed("idle", {{"attempt", m.attempt}, {"time", m.time}});
  }
  Message operator()(const Progress& m) const {
    Message ranks = Message::array();
    for (const RankProgress& r : m.ranks) {
      Message x = {{"index", r.index}, {"running", r.running}, {"last_output", r.last_output}};
      if (r.last_heartbeat) x["last_heartbeat"] = r.last_heartbeat;
      if (r.cpu_seconds) {
        x["cpu_seconds"] = *r.cpu_seconds;
        x["rss_bytes"] = r.rss_bytes;
      }
      if (r.gpu_util) {
        x["gpu_util"] = *r.gpu_util;
        x["gpu_memory_bytes"] = r.gpu_memory_bytes;
      }
      ranks.push_back(std::move(x));
    }
    return typed("progress",
                           {{"attempt", m.attempt}, {"time", m.time}, {"ranks", std::move(ranks)}});
  }
  Message operator()(const Signalled& m) const {
    return typed("signalled", {{"signal", m.signal}});
  }
  Message operator()(const Limits& m) const { return typed("limits", {{"why", cap(m.why)}}); }
  Message operator()(const Debug& m) const {
    return typed("debug", {{"attempt", m.attempt},
                                  {"index", m.index},
                                  {"state", cap(m.state)},
                                  {"reason", cap(m.reason)},
                                  {"where", cap(m.where)},
                                  {"time", m.time}});
  }
  Message operator()(const Stacks& m) const {
    Message ranks = Message::array();
    for (const RankStack& r : m.ranks) {
      Message x = {{"index", r.index}, {"state", cap(r.state)}};
      if (!r.stack.empty()) x["stack"] = cap(r.stack, kMaxString);
      if (!r.error.empty()) x["error"] = cap(r.error, kMaxString);
      ranks.push_back(std::move(x));
    }
    return typed("stacks", {{"attempt", m.attempt}, {"ranks", std::move(ranks)}});
  }
  Message operator()(const OutputsCopied& m) const {
    Message results = Message::array();
    for (const OutputCopied& r : m.results) {
      results.push_back(r.error.empty() ? Message{{"files", r.files}, {"bytes", r.bytes}}
                                        : Message{{"error", cap(r.error)}});
    }
    return typed("outputs_copied", {{"results", std::move(results)}});
  }
  // ---- to agents
  Message operator()(const Challenge& m) const {
    return typed("challenge", {{"nonce", m.nonce}, {"proof", m.proof}, {"pid", m.pid}});
  }
  Message operator()(const PlanMessage& m) const {
    Message j = Message::parse(encodePlan(m, plan::nodeToJson(m.node)), nullptr, false);
    return j.is_discarded() ? typed("plan") : j;
  }
  Message operator()(const Stage&) const { return typed("stage"); }
  Message operator()(const Files& m) const {
    Message files = Message::array();
    for (const plan::GeneratedFile& f : m.files) {
      files.push_back({{"path", f.path}, {"content", f.content}});
    }
    return typed("files", {{"files", std::move(files)}});
  }
  Message operator()(const Start& m) const {
    return typed("start", {{"attempt", m.attempt}});
  }
  Message operator()(const Stop& m) const {
    Message j = {{"grace_ms", m.grace_ms}, {"signal", m.signal}};
    if (m.exit) j["exit"] = *m.exit;
    return typed("stop", std::move(j));
  }
  Message operator()(const StacksRequest&) const { return typed("stacks"); }
  Message operator()(const Exit& m) const {
    Message j = {{"code", m.code}};
    if (!m.outputs.empty()) {
      Message outputs = Message::array();
      for (const plan::OutputPlan& o : m.outputs) {
        outputs.push_back({{"source", o.source}, {"target", o.target}});
      }
      j["outputs"] = std::move(outputs);
    }
    return typed("exit", std::move(j));
  }
};

struct Namer {
  const char* operator()(const Heartbeat&) const { return "heartbeat"; }
  const char* operator()(const Hello&) const { return "hello"; }
  const char* operator()(const Auth&) const { return "auth"; }
  const char* operator()(const Staged&) const { return "staged"; }
  const char* operator()(const StageFailed&) const { return "stage_failed"; }
  const char* operator()(const Started&) const { return "started"; }
  const char* operator()(const Exited&) const { return "exited"; }
  const char* operator()(const Idle&) const { return "idle"; }
  const char* operator()(const Progress&) const { return "progress"; }
  const char* operator()(const Signalled&) const { return "signalled"; }
  const char* operator()(const Limits&) const { return "limits"; }
  const char* operator()(const Debug&) const { return "debug"; }
  const char* operator()(const Stacks&) const { return "stacks"; }
  const char* operator()(const OutputsCopied&) const { return "outputs_copied"; }
  const char* operator()(const Challenge&) const { return "challenge"; }
  const char* operator()(const PlanMessage&) const { return "plan"; }
  const char* operator()(const Stage&) const { return "stage"; }
  const char* operator()(const Files&) const { return "files"; }
  const char* operator()(const Start&) const { return "start"; }
  const char* operator()(const Stop&) const { return "stop"; }
  const char* operator()(const StacksRequest&) const { return "stacks"; }
  const char* operator()(const Exit&) const { return "exit"; }
};

Error bad(const std::string& type, const std::string& what) {
  return Error{Code::kInvalidArgument,
               "control channel: " + (type.empty() ? std::string("a message") : "'" + type + "'") +
                   ": " + what};
}

// Checks the reader (and the message's own checks) and gives back the message or the error.
template <class T>
Result<T> done(const std::string& type, const Reader& r, T message) {
  if (!r.error().empty()) return tl::unexpected(bad(type, r.error()));
  return message;
}

// A list of strings, each at most `max` bytes.
void strings(Reader& r, const char* key, std::vector<std::string>& out, size_t max_items,
             size_t max) {
  const Message* list = r.array(key, max_items);
  if (!list) return;
  for (const Message& item : *list) {
    if (!item.is_string() || item.get_ref<const std::string&>().size() > max) {
      r.wrong(key, "must be a list of strings of at most " + std::to_string(max) + " bytes");
      return;
    }
    out.push_back(item.get<std::string>());
  }
}

// Each object of the list at `key`, read by `read` with a reader of its own.
template <class Fn>
void objects(Reader& r, const char* key, size_t max_items, size_t max_string, Fn read) {
  const Message* list = r.array(key, max_items);
  if (!list) return;
  for (const Message& item : *list) {
    if (!item.is_object()) {
      r.wrong(key, "must be a list of objects");
      return;
    }
    Reader each(item, max_string);
    read(each);
    if (!each.error().empty()) {
      r.wrong(key, "has an item whose " + each.error());
      return;
    }
  }
}

// The message's type, read by `r` (a reader of `m`). Errors: not an object, no type.
Result<std::string> typeOf(const Message& m, Reader& r) {
  if (!m.is_object()) return tl::unexpected(bad("", "not a JSON object"));
  std::string type;
  r.text("type", type, /*required=*/true);
  if (!r.error().empty()) return tl::unexpected(bad("", r.error()));
  return type;
}

}  // namespace

Message encode(const ToCoordinator& message) { return std::visit(Encoder{}, message); }
Message encode(const ToAgent& message) { return std::visit(Encoder{}, message); }
Message encode(const Heartbeat& message) { return Encoder{}(message); }
const char* typeName(const ToCoordinator& message) { return std::visit(Namer{}, message); }
const char* typeName(const ToAgent& message) { return std::visit(Namer{}, message); }

std::string encodePlan(const PlanMessage& m, const std::string& node_json) {
  const Message head = {{"type", "plan"},
                        {"workdir", m.workdir},
                        {"job_dir", m.job_dir},
                        {"mark", m.mark},
                        {"heartbeat_ms", m.heartbeat_ms},
                        {"heartbeat_timeout_ms", m.heartbeat_timeout_ms},
                        // For a stop the agent is told from outside (a cluster preempting it).
                        {"stop_signal", m.stop_signal},
                        {"grace_ms", m.grace_ms}};
  std::string line = head.dump(-1, ' ', false, Message::error_handler_t::replace);
  line.pop_back();  // its '}'
  line += ",\"node\":" + node_json + "}";
  return line;
}

Result<ToCoordinator> decodeToCoordinator(const Message& m) {
  Reader r(m, kMaxShort);
  COHORT_ASSIGN(const std::string type, typeOf(m, r));
  if (type == "heartbeat") return Heartbeat{};
  if (type == "hello") {
    Hello x;
    r.integer("node", x.node, true);
    r.text("nonce", x.nonce, true);
    r.integer("pid", x.pid);
    r.text("host", x.host);
    r.text("interface", x.interface);
    r.text("hostname", x.hostname);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "auth") {
    Auth x;
    r.text("proof", x.proof, true);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "staged") {
    Staged x;
    r.integer("files", x.files);
    r.integer("bytes", x.bytes);
    r.number("seconds", x.seconds);
    r.boolean("own_dir", x.own_dir);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "stage_failed") {
    StageFailed x;
    r.text("error", x.error);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "started") {
    Started x;
    r.integer("attempt", x.attempt, true);
    r.integer("count", x.count);
    r.integer("time", x.time);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "exited") {
    Exited x;
    r.integer("attempt", x.attempt, true);
    r.integer("rank", x.rank, true);
    r.integer("code", x.code);
    r.integer("signal", x.signal);
    r.boolean("by_cohort", x.by_cohort);
    r.text("stopped_by", x.stopped_by);
    r.text("stop_reason", x.stop_reason);
    r.integer("time", x.time);
    r.text("error", x.error);
    r.integer("memory_limit", x.memory_limit);
    strings(r, "tail", x.tail, kMaxTailLines, kMaxShort);
    if (r.error().empty() && !x.stopped_by.empty() && x.stopped_by != "coordinator" &&
        x.stopped_by != "agent") {
      r.wrong("stopped_by", "must be coordinator or agent");
    }
    if (r.error().empty() && x.memory_limit < 0) r.wrong("memory_limit", "must not be negative");
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "idle") {
    Idle x;
    r.integer("attempt", x.attempt, true);
    r.integer("time", x.time);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "progress") {
    Progress x;
    r.integer("attempt", x.attempt, true);
    r.integer("time", x.time);
    objects(r, "ranks", kMaxItems, kMaxShort, [&](Reader& each) {
      RankProgress p;
      each.integer("index", p.index, true);
      each.boolean("running", p.running);
      each.integer("last_output", p.last_output);
      each.integer("last_heartbeat", p.last_heartbeat);
      each.optionalNumber("cpu_seconds", p.cpu_seconds);
      each.integer("rss_bytes", p.rss_bytes);
      each.optionalNumber("gpu_util", p.gpu_util);
      each.integer("gpu_memory_bytes", p.gpu_memory_bytes);
      x.ranks.push_back(p);
    });
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "signalled") {
    Signalled x;
    r.integer("signal", x.signal, true);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "limits") {
    Limits x;
    r.text("why", x.why);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "debug") {
    Debug x;
    r.integer("attempt", x.attempt, true);
    r.integer("index", x.index, true);
    r.text("state", x.state);
    r.text("reason", x.reason);
    r.text("where", x.where);
    r.integer("time", x.time);
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "stacks") {
    Stacks x;
    r.integer("attempt", x.attempt);
    objects(r, "ranks", kMaxItems, kMaxString, [&](Reader& each) {
      RankStack s;
      each.integer("index", s.index, true);
      each.text("state", s.state);
      each.text("stack", s.stack);
      each.text("error", s.error);
      x.ranks.push_back(std::move(s));
    });
    return done<ToCoordinator>(type, r, x);
  }
  if (type == "outputs_copied") {
    OutputsCopied x;
    objects(r, "results", kMaxItems, kMaxShort, [&](Reader& each) {
      OutputCopied c;
      each.integer("files", c.files);
      each.integer("bytes", c.bytes);
      each.text("error", c.error);
      x.results.push_back(std::move(c));
    });
    return done<ToCoordinator>(type, r, x);
  }
  return tl::unexpected(bad(type, "not a message an agent sends"));
}

Result<ToAgent> decodeToAgent(const Message& m) {
  Reader r(m, kMaxShort);
  COHORT_ASSIGN(const std::string type, typeOf(m, r));
  if (type == "heartbeat") return Heartbeat{};
  if (type == "challenge") {
    Challenge x;
    r.text("nonce", x.nonce, true);
    r.text("proof", x.proof, true);
    r.integer("pid", x.pid);
    return done<ToAgent>(type, r, x);
  }
  if (type == "plan") {
    PlanMessage x;
    r.text("workdir", x.workdir);
    r.text("job_dir", x.job_dir);
    r.text("mark", x.mark);
    r.integer("heartbeat_ms", x.heartbeat_ms);
    r.integer("heartbeat_timeout_ms", x.heartbeat_timeout_ms);
    r.integer("stop_signal", x.stop_signal);
    r.integer("grace_ms", x.grace_ms);
    if (!r.error().empty()) return tl::unexpected(bad(type, r.error()));
    static const Message kNone = Message::object();
    auto node = plan::nodeFromJsonValue(m.contains("node") ? m.at("node") : kNone);
    if (!node) return tl::unexpected(bad(type, node.error().message));
    x.node = std::move(*node);
    return ToAgent{std::move(x)};
  }
  if (type == "stage") return Stage{};
  if (type == "files") {
    Files x;
    objects(r, "files", kMaxItems, std::numeric_limits<size_t>::max(), [&](Reader& each) {
      plan::GeneratedFile f;
      each.text("path", f.path, true);
      each.text("content", f.content);
      x.files.push_back(std::move(f));
    });
    return done<ToAgent>(type, r, std::move(x));
  }
  if (type == "start") {
    Start x;
    r.integer("attempt", x.attempt, true);
    return done<ToAgent>(type, r, x);
  }
  if (type == "stop") {
    Stop x;
    r.integer("grace_ms", x.grace_ms);
    r.integer("signal", x.signal);
    r.optionalInt("exit", x.exit);
    if (r.error().empty() && x.grace_ms < 0) r.wrong("grace_ms", "must not be negative");
    return done<ToAgent>(type, r, x);
  }
  if (type == "stacks") return StacksRequest{};
  if (type == "exit") {
    Exit x;
    r.integer("code", x.code, true);
    objects(r, "outputs", kMaxItems, kMaxShort, [&](Reader& each) {
      plan::OutputPlan o;
      each.text("source", o.source, true);
      each.text("target", o.target, true);
      x.outputs.push_back(std::move(o));
    });
    return done<ToAgent>(type, r, std::move(x));
  }
  return tl::unexpected(bad(type, "not a message a coordinator sends"));
}

}  // namespace cohort::agent::protocol
