// The job's record (events.jsonl, result.json) when the disk under the data root fills up: the
// job must fail and say which file could not be written, never report success. The data root
// is a tiny tmpfs that a rank fills with its output; mounting one needs root (or CAP_SYS_ADMIN),
// so the test is skipped, saying why, where that is not allowed.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness.h"

namespace cohort::testing {
namespace {

// A tmpfs of `size` mounted on a fresh directory, unmounted when this goes.
class TinyDisk {
 public:
  explicit TinyDisk(const std::string& size) : path_(tempDir() + "/disk") {
    if (::mkdir(path_.c_str(), 0755) < 0) {
      why_ = "mkdir '" + path_ + "': " + std::strerror(errno);
      return;
    }
    std::string options = "size=" + size + ",mode=0755";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) < 0) {
      why_ = "mounting a tmpfs is not allowed here (" + std::string(std::strerror(errno)) +
             "): it needs root or CAP_SYS_ADMIN";
      return;
    }
    mounted_ = true;
  }
  ~TinyDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  TinyDisk(const TinyDisk&) = delete;
  TinyDisk& operator=(const TinyDisk&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string why_;
  bool mounted_ = false;
};

TEST(DataRootFull, JobWhoseRecordCannotBeWrittenFailsAndNamesTheFile) {
  TinyDisk disk("256k");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  // The rank's output (its log file, on the tiny disk) fills the disk, then the rank exits 0:
  // without its record the job must not say it succeeded.
  auto r = runCohort({"run", "--data-root", disk.path(), "--nodes", "1", "--", testRank(),
                      "flood=2000000"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const bool names_a_record_file =
      contains(r.err, "could not write the job's record 'result.json': No space left on device") ||
      contains(r.err, "could not write the job's record 'events.jsonl': No space left on device");
  EXPECT_TRUE(names_a_record_file) << r.err;
  EXPECT_FALSE(contains(r.err, "succeeded")) << r.err;
  EXPECT_TRUE(contains(r.err, " failed: could not write the job's record '")) << r.err;
  // Whatever made it to the disk does not claim success either.
  std::string job = onlyJobDir(disk.path());
  ASSERT_FALSE(job.empty());
  struct stat st{};
  if (::stat((job + "/result.json").c_str(), &st) == 0) {
    EXPECT_NE(readJson(job + "/result.json")["state"], "succeeded");
  }
}

// The plan's files are written while the agents start: when they cannot be, no rank starts,
// and the job fails naming the file, with its record saying so.
TEST(DataRootFull, JobWhosePlanCannotBeWrittenStartsNoRank) {
  TinyDisk disk("64k");
  if (!disk.mounted()) GTEST_SKIP() << disk.why();
  // 64 ranks make a plan.json of about 200 KB; the rest of the job's record fits.
  auto r = runCohort({"run", "--data-root", disk.path(), "--nodes", "2", "--nproc-per-node", "32",
                      "--", testRank()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "could not write the job's record 'plan.json': No space left on "
                       "device"))
      << r.err;
  std::string job = onlyJobDir(disk.path());
  ASSERT_FALSE(job.empty());
  EXPECT_EQ(readJson(job + "/result.json")["state"], "failed");
  EXPECT_FALSE(contains(readText(job + "/events.jsonl"), "rank_exit")) << "a rank ran";
}

// A rank that writes into its own job directory (ranks that run as the job's owner, unsandboxed,
// can) puts a "succeeded" result of its own where the coordinator's temporary file would be
// named (a file in its place, not written into it), and under the final name: the record still
// says what happened.
TEST(JobRecord, ARankCannotPlantTheJobsResult) {
  const std::string root = tempDir() + "/plant";
  const std::string script =
      "job=$(dirname \"$COHORT_LOG_DIR\"); pid=$(cat \"$job/coordinator.pid\"); "
      "for f in \"$job/result.json.tmp.$pid.$pid\" \"$job/result.json\"; do "
      "rm -f \"$f\"; printf '{\"state\": \"succeeded\", \"exit_code\": 0}\\n' > \"$f\" && "
      "echo \"planted $f\"; "
      "done; exit 3";
  auto r = runCohort({"run", "--data-root", root, "--", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.out + r.err, "planted ")) << r.out << r.err;
  const std::string job = onlyJobDir(root);
  ASSERT_FALSE(job.empty());
  const nlohmann::json result = readJson(job + "/result.json");
  EXPECT_EQ(result["state"], "failed") << result.dump();
  EXPECT_EQ(result["exit_code"], 3) << result.dump();
}

}  // namespace
}  // namespace cohort::testing
