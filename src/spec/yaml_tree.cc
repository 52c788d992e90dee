#include "spec/yaml_tree.h"

#include <yaml.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

namespace cohort::spec {
namespace {

using Refused = tl::unexpected<YamlRefusal>;

const char* kNullTag = "tag:yaml.org,2002:null";

std::string text(const yaml_char_t* s) {
  return s ? std::string(reinterpret_cast<const char*>(s)) : std::string();
}

int lineOf(const yaml_mark_t& mark) { return static_cast<int>(mark.line) + 1; }

// A scalar event as a node: plain text that YAML reads as null is a null node.
YamlNode scalarNode(const yaml_event_t& e) {
  YamlNode node;
  node.line = lineOf(e.start_mark);
  node.tag = text(e.data.scalar.tag);
  node.scalar.assign(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
  node.quoted = e.data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
  const bool plain_null = !node.quoted && node.tag.empty() &&
                          (node.scalar.empty() || node.scalar == "~" || node.scalar == "null" ||
                           node.scalar == "Null" || node.scalar == "NULL");
  node.kind = plain_null || node.tag == kNullTag ? YamlNode::Kind::kNull : YamlNode::Kind::kScalar;
  if (node.kind == YamlNode::Kind::kNull) node.scalar.clear();
  return node;
}

// How many nodes a tree holds (its depth is bounded by the limits: the recursion is too).
size_t nodesIn(const YamlNode& node) {
  size_t n = 1;
  for (const YamlNode& item : node.items) n += nodesIn(item);
  for (const auto& [key, value] : node.entries) n += nodesIn(key) + nodesIn(value);
  return n;
}

class Builder {
 public:
  explicit Builder(const YamlLimits& limits) : limits_(limits) {}

  tl::expected<YamlNode, YamlRefusal> run(std::string_view input) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return Refused(YamlRefusal{1, "out of memory"});
    std::unique_ptr<yaml_parser_t, void (*)(yaml_parser_t*)> owned(&parser, yaml_parser_delete);
    yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(input.data()),
                                 input.size());
    for (;;) {
      yaml_event_t event;
      if (!yaml_parser_parse(&parser, &event)) {
        const std::string problem = parser.problem ? parser.problem : "an error";
        if (parser.error == YAML_READER_ERROR) {
          // The bytes themselves (not UTF-8, a control character): where, by offset.
          const size_t at = std::min(parser.problem_offset, input.size());
          const int line = 1 + static_cast<int>(std::count(input.begin(), input.begin() + at, '\n'));
          return Refused(YamlRefusal{line, "not UTF-8 text, or a control character: " + problem});
        }
        std::string what = "not valid YAML: " + problem;
        if (parser.context) what += " " + std::string(parser.context);
        return Refused(YamlRefusal{lineOf(parser.problem_mark), what});
      }
      std::unique_ptr<yaml_event_t, void (*)(yaml_event_t*)> held(&event, yaml_event_delete);
      if (event.type == YAML_STREAM_END_EVENT) break;
      if (auto refused = on(event)) return Refused(std::move(*refused));
    }
    return root_ ? std::move(*root_) : YamlNode{};
  }

 private:
  struct Open {
    YamlNode node;
    std::string anchor;
    std::optional<YamlNode> key;  // a mapping's key, waiting for its value
  };

  std::optional<YamlRefusal> on(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_DOCUMENT_START_EVENT:
        if (++documents_ > 1) {
          return YamlRefusal{lineOf(e.start_mark),
                             "text after the end of the job (a job file holds one YAML "
                             "document)"};
        }
        return std::nullopt;
      case YAML_SCALAR_EVENT:
        return place(scalarNode(e), text(e.data.scalar.anchor));
      case YAML_ALIAS_EVENT: {
        auto found = anchors_.find(text(e.data.alias.anchor));
        if (found == anchors_.end()) {
          return YamlRefusal{lineOf(e.start_mark),
                             "not valid YAML: the alias *" + text(e.data.alias.anchor) +
                                 " names no anchor (&" + text(e.data.alias.anchor) +
                                 ") before it"};
        }
        YamlNode copy = found->second.first;
        nodes_ += found->second.second - 1;  // place() counts one
        copy.line = lineOf(e.start_mark);
        return place(std::move(copy), "");
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        if (static_cast<int>(open_.size()) + 1 > limits_.max_depth) {
          return YamlRefusal{lineOf(e.start_mark),
                             "nested deeper than " + std::to_string(limits_.max_depth) +
                                 " levels ([ ] and { } inside one another)"};
        }
        const bool map = e.type == YAML_MAPPING_START_EVENT;
        Open open;
        open.node.kind = map ? YamlNode::Kind::kMap : YamlNode::Kind::kSequence;
        open.node.line = lineOf(e.start_mark);
        open.node.tag = text(map ? e.data.mapping_start.tag : e.data.sequence_start.tag);
        open.anchor = text(map ? e.data.mapping_start.anchor : e.data.sequence_start.anchor);
        open_.push_back(std::move(open));
        return std::nullopt;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Open done = std::move(open_.back());
        open_.pop_back();
        return place(std::move(done.node), done.anchor);
      }
      default:
        return std::nullopt;
    }
  }

  // A finished node into its parent (or as the document), remembered under its anchor.
  std::optional<YamlRefusal> place(YamlNode node, const std::string& anchor) {
    if (++nodes_ > limits_.max_nodes) {
      return YamlRefusal{node.line, "more than " + std::to_string(limits_.max_nodes) +
                                        " values (aliases count each time they are used)"};
    }
    if (!anchor.empty()) {
      // The anchor keeps a copy: it counts too, or anchors nested around one large value would
      // each hold it again (64 levels of one 200,000-value list: gigabytes).
      const size_t size = nodesIn(node);
      nodes_ += size;
      if (nodes_ > limits_.max_nodes) {
        return YamlRefusal{node.line, "more than " + std::to_string(limits_.max_nodes) +
                                          " values (aliases count each time they are used)"};
      }
      anchors_[anchor] = {node, size};
    }
    if (open_.empty()) {
      root_ = std::move(node);
      return std::nullopt;
    }
    Open& parent = open_.back();
    if (parent.node.isSequence()) {
      parent.node.items.push_back(std::move(node));
    } else if (!parent.key) {
      parent.key = std::move(node);
    } else {
      parent.node.entries.push_back({std::move(*parent.key), std::move(node)});
      parent.key.reset();
    }
    return std::nullopt;
  }

  const YamlLimits limits_;
  std::vector<Open> open_;
  std::optional<YamlNode> root_;
  std::map<std::string, std::pair<YamlNode, size_t>> anchors_;  // the node, its size
  int documents_ = 0;
  size_t nodes_ = 0;
};

}  // namespace

tl::expected<YamlNode, YamlRefusal> parseYamlDocument(std::string_view text,
                                                      const YamlLimits& limits) {
  return Builder(limits).run(text);
}

}  // namespace cohort::spec
