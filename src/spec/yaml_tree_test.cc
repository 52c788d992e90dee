// The job file's one reader: libyaml's events into a tree, with lines, repeats and limits.
#include "spec/yaml_tree.h"

#include <gtest/gtest.h>

namespace cohort::spec {
namespace {

YamlNode parsed(const std::string& text, YamlLimits limits = {}) {
  auto node = parseYamlDocument(text, limits);
  EXPECT_TRUE(node) << text << ": " << (node ? "" : node.error().what);
  return node ? *node : YamlNode{};
}

YamlRefusal refused(const std::string& text, YamlLimits limits = {}) {
  auto node = parseYamlDocument(text, limits);
  EXPECT_FALSE(node) << text;
  return node ? YamlRefusal{} : node.error();
}

TEST(YamlTree, MappingsKeepOrderRepeatsAndLines) {
  YamlNode root = parsed("b: 1\na: [x, 'y']\nb: 2\n");
  ASSERT_TRUE(root.isMap());
  ASSERT_EQ(root.entries.size(), 3u) << "a repeated key is kept, for the reader to name";
  EXPECT_EQ(root.entries[0].first.scalar, "b");
  EXPECT_EQ(root.entries[2].first.scalar, "b");
  EXPECT_EQ(root.entries[2].first.line, 3);
  const YamlNode& list = root.entries[1].second;
  ASSERT_TRUE(list.isSequence());
  EXPECT_FALSE(list.items[0].quoted);
  EXPECT_TRUE(list.items[1].quoted) << "a quoted value is a string, never a number";
}

TEST(YamlTree, PlainNullsAreNullAndQuotedOnesAreText) {
  YamlNode root = parsed("a:\nb: ~\nc: null\nd: 'null'\ne: !!int 3\n");
  EXPECT_TRUE(root.entries[0].second.isNull());
  EXPECT_TRUE(root.entries[1].second.isNull());
  EXPECT_TRUE(root.entries[2].second.isNull());
  EXPECT_TRUE(root.entries[3].second.isScalar());
  EXPECT_EQ(root.entries[4].second.tag, "tag:yaml.org,2002:int");
  EXPECT_TRUE(parsed("").isNull());
  EXPECT_TRUE(parsed("# only a comment\n").isNull());
}

TEST(YamlTree, DepthIsRefusedAtTheLineItIsReached) {
  YamlLimits limits;
  limits.max_depth = 3;
  EXPECT_TRUE(parsed("a: {b: [1]}\n", limits).isMap());
  YamlRefusal r = refused("a:\n  b:\n    - [1]\n", limits);
  EXPECT_EQ(r.line, 3);
  EXPECT_NE(r.what.find("nested deeper than 3 levels"), std::string::npos) << r.what;
  // Brackets inside text are text.
  EXPECT_TRUE(parsed("a: '[[[[[[['\n", limits).isMap());
}

TEST(YamlTree, ASecondDocumentIsRefused) {
  YamlRefusal r = refused("a: 1\n---\nb: 2\n");
  EXPECT_EQ(r.line, 2);
  EXPECT_NE(r.what.find("text after the end of the job"), std::string::npos) << r.what;
  EXPECT_TRUE(parsed("---\na: 1\n...\n").isMap());
}

TEST(YamlTree, AliasesAreCopiedAndCountedSoTheyCannotExplode) {
  YamlNode root = parsed("base: &b {x: 1}\nother: *b\n");
  ASSERT_TRUE(root.entries[1].second.isMap());
  EXPECT_EQ(root.entries[1].second.entries[0].second.scalar, "1");
  // Each level nine aliases of the one before: 9^8 values from eight lines.
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 0; k < 8; ++k) laughs += ", " + prev;
    laughs += "]\n";
  }
  YamlLimits limits;
  limits.max_nodes = 100000;
  YamlRefusal r = refused(laughs, limits);
  EXPECT_NE(r.what.find("more than 100000 values"), std::string::npos) << r.what;
  EXPECT_NE(refused("a: *nowhere\n").what.find("names no anchor"), std::string::npos);
  // Anchors nested around one large list, never used: each would keep its own copy.
  std::string nested = "a: ";
  for (int i = 0; i < 10; ++i) nested += "&n" + std::to_string(i) + " [";
  for (int i = 0; i < 20000; ++i) nested += i ? ", x" : "x";
  nested += std::string(10, ']') + "\n";
  YamlRefusal copies = refused(nested, limits);
  EXPECT_NE(copies.what.find("more than 100000 values"), std::string::npos) << copies.what;
}

TEST(YamlTree, SyntaxErrorsSayLibyamlsProblemWithTheLine) {
  YamlRefusal r = refused("a: 1\nb: [1, 2\n");
  EXPECT_NE(r.what.find("not valid YAML"), std::string::npos) << r.what;
  EXPECT_GE(r.line, 2);
}

}  // namespace
}  // namespace cohort::spec
