// `cohort env exec`'s arguments and the order of its binds (env/image_exec.h). Running in an
// image needs root and an image: tests/integration/images_test.cc does that.
#include "env/image_exec.h"

#include <gtest/gtest.h>

namespace cohort::env {
namespace {

TEST(ImageExec, ParsesWhatThePlanWrites) {
  auto e = parseImageExec({"--image", "localhost/x:1", "--layer", "/s/top", "--layer", "/s/base",
                           "--bind", "/job/work", "--ro-bind", "/job/files", "--unset",
                           "PYTHONPATH", "--", "python3", "--image", "-c", "1"});
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->image, "localhost/x:1");
  EXPECT_EQ(e->layers, (std::vector<std::string>{"/s/top", "/s/base"}));
  EXPECT_EQ(e->binds, std::vector<std::string>{"/job/work"});
  EXPECT_EQ(e->ro_binds, std::vector<std::string>{"/job/files"});
  EXPECT_EQ(e->unset, std::vector<std::string>{"PYTHONPATH"});
  // What follows "--" is the command's, flags of ours included.
  EXPECT_EQ(e->argv, (std::vector<std::string>{"python3", "--image", "-c", "1"}));
}

TEST(ImageExec, RefusesWhatItCannotBind) {
  for (const char* path : {"relative", "/", "/a/../etc", "/a/./b", "//a"}) {
    auto e = parseImageExec({"--image", "x", "--bind", path, "--", "true"});
    ASSERT_FALSE(e) << path;
    EXPECT_NE(e.error().message.find("--bind: '"), std::string::npos) << e.error().message;
  }
  EXPECT_FALSE(parseImageExec({"--image", "x", "--layer", "diff", "--", "true"}));
  EXPECT_FALSE(parseImageExec({
      "--image",
      "x",
      "--",
  }));
  EXPECT_FALSE(parseImageExec({"--layer", "/s", "--", "true"}));
  auto unknown = parseImageExec({"--image", "x", "--privileged", "--", "true"});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("'--privileged': not a flag"), std::string::npos);
}

TEST(ImageExec, BindsParentsFirstAndEachPathOnce) {
  ImageExec e;
  e.binds = {"/data/jobs/j/work", "/src/code", "/data/jobs/j/work"};
  e.ro_binds = {"/data/jobs/j/work/node0/in", "/src/code", "/store"};
  const std::vector<ImageBind> order = bindOrder(e);
  std::vector<std::string> paths;
  for (const ImageBind& b : order) paths.push_back(b.path + (b.read_only ? " ro" : " rw"));
  EXPECT_EQ(paths, (std::vector<std::string>{"/store ro", "/src/code rw", "/data/jobs/j/work rw",
                                             "/data/jobs/j/work/node0/in ro"}));
}

}  // namespace
}  // namespace cohort::env
