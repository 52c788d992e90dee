// The one reader of job files: libyaml's event parser, which keeps its own stack (no recursion
// over the text), builds a tree as the events arrive and stops at the first thing a job file
// must not hold: nesting deeper than a limit, more nodes than a limit (aliases included, copied
// as they are met, so that a few lines cannot expand to millions), or a second document. Keys
// keep their order and repeats, each node its line, so the job file's reader names where a
// field was given twice. No I/O; libyaml's own messages come with their line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/result.h"

namespace cohort::spec {

struct YamlEntry;

struct YamlNode {
  enum class Kind { kNull, kScalar, kSequence, kMap };
  Kind kind = Kind::kNull;
  int line = 0;        // 1-based, where the node starts
  std::string scalar;  // kScalar: its text
  bool quoted = false; // kScalar: written in quotes (or as a block), never a number
  std::string tag;     // an explicit tag ("tag:yaml.org,2002:int" for !!int), else ""
  std::vector<YamlNode> items;                          // kSequence
  std::vector<YamlEntry> entries;                       // kMap: in order, repeats kept

  bool isNull() const { return kind == Kind::kNull; }
  bool isScalar() const { return kind == Kind::kScalar; }
  bool isSequence() const { return kind == Kind::kSequence; }
  bool isMap() const { return kind == Kind::kMap; }
  // Entries of a mapping, items of a list, 0 otherwise.
  size_t size() const;
};

// A mapping's entry: its key and its value. A struct of its own rather than a std::pair, which
// clang's library cannot instantiate while YamlNode is still incomplete.
struct YamlEntry {
  YamlNode first;   // the key
  YamlNode second;  // the value
};

inline size_t YamlNode::size() const {
  return isMap() ? entries.size() : isSequence() ? items.size() : 0;
}

struct YamlLimits {
  int max_depth = 16;          // mappings and lists inside one another
  size_t max_nodes = 1 << 20;  // every node, an alias's copy counted again
};

// Why a text is not a job file's YAML, and on which line.
struct YamlRefusal {
  int line = 1;
  std::string what;  // "nested deeper than 16 levels", "not valid YAML: ...", ...
};

// The one document of `text` (a null node when it has none). Errors: the refusal, by line.
// Plain scalars that YAML reads as null (nothing, ~, null) are null nodes.
tl::expected<YamlNode, YamlRefusal> parseYamlDocument(std::string_view text,
                                                      const YamlLimits& limits);

}  // namespace cohort::spec
