// The file work done for a job or an account (account/file_work.h), in this process: what a
// server's job names below an input root is opened with no link followed and copied with links
// refused, what is in a store is reached only through the store handed in, and a request
// survives its codec whole or is refused.
#include "account/file_work.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "storage/dir_store.h"
#include "util/fd.h"
#include "util/temp_dir_for_tests.h"

namespace cohort::account {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  auto text = readFile(path);
  return text ? *text : "<missing>";
}

class FileWork : public ::testing::Test {
 protected:
  void SetUp() override {
    roots_ = dir_.path() + "/datasets";
    std::filesystem::create_directories(roots_ + "/digits/train");
    std::ofstream(roots_ + "/digits/train/a.csv") << "1,2\n";
    std::ofstream(dir_.path() + "/secret") << "server-secret\n";
    work_ = dir_.path() + "/jobs/j1/work/node0";
  }
  Result<Done> stageOne(const std::string& source, const std::string& beneath) {
    StageInputs w{work_, {}, {{source, -1, beneath, work_ + "/in", false}}};
    return perform(w, {});
  }
  TempDir dir_;
  std::string roots_, work_;
};

TEST_F(FileWork, AnInputBelowItsRootIsStaged) {
  auto done = stageOne(roots_ + "/digits", roots_);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->files, 1);
  EXPECT_EQ(slurp(work_ + "/in/train/a.csv"), "1,2\n");
}

TEST_F(FileWork, ALinkNamedOrOnTheWayOrInsideIsRefusedByName) {
  std::filesystem::create_symlink(dir_.path() + "/secret", roots_ + "/planted");
  std::filesystem::create_directory_symlink(dir_.path(), roots_ + "/up");
  std::filesystem::create_symlink(dir_.path() + "/secret", roots_ + "/digits/train/b.csv");
  for (const auto& [source, named] :
       std::vector<std::pair<std::string, std::string>>{
           {roots_ + "/planted", "'" + roots_ + "/planted' is a symbolic link"},
           {roots_ + "/up/secret", "'" + roots_ + "/up' is a symbolic link"},
           {roots_ + "/digits", "b.csv"}}) {
    auto done = stageOne(source, roots_);
    ASSERT_FALSE(done) << source;
    EXPECT_TRUE(contains(done.error().message, named)) << done.error().message;
    EXPECT_TRUE(contains(done.error().message, "symbolic link")) << done.error().message;
    EXPECT_FALSE(contains(slurp(work_ + "/in"), "server-secret"));
  }
}

TEST_F(FileWork, AFileWithOtherNamesOrOutsideTheRootIsRefused) {
  ASSERT_EQ(::link((dir_.path() + "/secret").c_str(), (roots_ + "/hard").c_str()), 0);
  auto hard = stageOne(roots_ + "/hard", roots_);
  ASSERT_FALSE(hard);
  EXPECT_TRUE(contains(hard.error().message, "hard links")) << hard.error().message;
  auto outside = stageOne(dir_.path() + "/secret", roots_);
  ASSERT_FALSE(outside);
  EXPECT_TRUE(contains(outside.error().message, "is not below")) << outside.error().message;
  auto dotdot = stageOne(roots_ + "/../secret", roots_);
  ASSERT_FALSE(dotdot);
}

// An admin may list / itself: what is below it is still opened without a link, magic ones
// (/proc/<pid>/root) included.
TEST_F(FileWork, BelowTheRootOfAllNoLinkIsFollowedEither) {
  auto done = stageOne(roots_ + "/digits", "/");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(slurp(work_ + "/in/train/a.csv"), "1,2\n");
  std::filesystem::create_symlink(dir_.path() + "/secret", roots_ + "/planted");
  auto link = stageOne(roots_ + "/planted", "/");
  ASSERT_FALSE(link);
  EXPECT_TRUE(contains(link.error().message, "'" + roots_ + "/planted' is a symbolic link"))
      << link.error().message;
  auto magic = stageOne("/proc/self/root" + roots_ + "/digits", "/");
  ASSERT_FALSE(magic);
  EXPECT_TRUE(contains(magic.error().message, "link")) << magic.error().message;
}

TEST_F(FileWork, AUsersOwnInputFollowsLinksAsCpDoes) {
  std::filesystem::create_symlink(roots_ + "/digits", dir_.path() + "/mine");
  auto done = stageOne(dir_.path() + "/mine", "");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(slurp(work_ + "/in/train/a.csv"), "1,2\n");
}

TEST_F(FileWork, AStoreInputComesThroughTheStoreHandedIn) {
  auto store = storage::makeDirStore(dir_.path() + "/store/datasets", "store://datasets");
  const std::string src = roots_ + "/digits/train/a.csv";
  UniqueFd fd(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(store->put("digits/a.csv", fd.get(), 4, nullptr));
  StageInputs w{work_, {work_ + "/.scratch/tmp"}, {{"digits", 0, "", work_ + "/in", false}}};
  auto done = perform(w, {store.get()});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(slurp(work_ + "/in/a.csv"), "1,2\n");
  struct stat st {};
  ASSERT_EQ(::stat((work_ + "/.scratch/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A scratch directory that is there already is not the job's: refused.
  auto again = perform(w, {store.get()});
  ASSERT_FALSE(again);
  EXPECT_TRUE(contains(again.error().message, ".scratch/tmp")) << again.error().message;
}

TEST_F(FileWork, AnOutputWithALinkIsRefusedAndNothingReachesTheStore) {
  const std::string out = dir_.path() + "/output";
  std::filesystem::create_directories(out);
  std::ofstream(out + "/model.txt") << "weights\n";
  std::filesystem::create_symlink(dir_.path() + "/secret", out + "/loot");
  auto store = storage::makeDirStore(dir_.path() + "/store/models", "store://models");
  auto done = perform(CopyOutput{out, "run1", 0}, {store.get()});
  ASSERT_FALSE(done);
  EXPECT_TRUE(contains(done.error().message, "loot")) << done.error().message;
  EXPECT_FALSE(store->head("run1/loot"));
  ::unlink((out + "/loot").c_str());
  auto copied = perform(CopyOutput{out, "run1", 0}, {store.get()});
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_TRUE(store->head("run1/model.txt"));
}

// What an account left is removed without following its links; emptied, a directory stays.
TEST_F(FileWork, RemovingFollowsNoLinkAndMayKeepTheDirectory) {
  const std::string left = dir_.path() + "/left";
  std::filesystem::create_directories(left + "/sub");
  std::ofstream(left + "/sub/f") << "x";
  std::filesystem::create_directory_symlink(roots_, left + "/sub/to-datasets");
  ASSERT_TRUE(perform(Remove{{left}, true}, {}));
  EXPECT_TRUE(std::filesystem::is_directory(left));
  EXPECT_TRUE(std::filesystem::is_empty(left));
  EXPECT_EQ(slurp(roots_ + "/digits/train/a.csv"), "1,2\n") << "a link was followed";
  ASSERT_TRUE(perform(Remove{{left}}, {}));
  EXPECT_FALSE(std::filesystem::exists(left));
}

TEST_F(FileWork, RequestsCrossTheirCodecWholeAndAnythingElseIsRefused) {
  const Work works[] = {
      StageInputs{"/w", {"/w/.scratch/tmp"}, {{"/d/x", -1, "/d", "/w/in", true}, {"k", 0, "", "/w/k", false}}},
      CopyOutput{"/j/output", "models/run1", 2},
      Extract{"/u/.partial-x/tree", {100, 7}},
      Snapshot{"/j/code", "/u/.partial-y/tree", {5, 9}},
      Remove{{"/dev/shm/cohort-j-node0"}}, Remove{{"/envs/a", "/envs/b"}, true}};
  for (const Work& w : works) {
    auto back = decodeWork(encodeWork(w));
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(encodeWork(*back), encodeWork(w));
  }
  for (const char* bad :
       {"", "[]", "{\"op\":\"format\"}", "{\"op\":\"stage\",\"work_dir\":1,\"dirs\":[],\"inputs\":[]}",
        "{\"op\":\"stage\",\"work_dir\":\"/w\",\"dirs\":[],\"inputs\":[{\"source\":\"x\"}]}",
        "{\"op\":\"output\",\"source\":\"a\",\"target\":\"b\",\"store\":99999}",
        "{\"op\":\"remove\",\"paths\":[1]}", "{\"op\":\"extract\",\"dest\":\"/x\"}"}) {
    auto work = decodeWork(bad);
    ASSERT_FALSE(work) << bad;
    EXPECT_EQ(work.error().code, Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace cohort::account
