#include "agent/gpu.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

namespace cohort::agent {
namespace {

// What nvidia-smi prints for the two queries (a stand-in: written from its documented CSV
// format, not captured from a GPU).
constexpr const char* kDevices =
    "0, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000000, 87, 30210, 81559\n"
    "1, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000001, 3, 512, 81559\n";
constexpr const char* kProcesses =
    "4242, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000000, 30000\n"
    "4243, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000000, 200\n"
    "4243, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000001, 500\n"
    "999, GPU-5a1c0f4e-aaaa-bbbb-cccc-000000000001, 10\n";

TEST(GpuParse, DevicesAndProcessesAreReadInBytes) {
  auto devices = parseGpuDevices(kDevices);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].index, 1);
  EXPECT_EQ(devices[0].utilization, 87);
  EXPECT_EQ(devices[0].memory_used_bytes, int64_t{30210} << 20);
  EXPECT_EQ(devices[0].memory_total_bytes, int64_t{81559} << 20);
  auto processes = parseGpuProcesses(kProcesses);
  ASSERT_EQ(processes.size(), 4u);
  EXPECT_EQ(processes[0].pid, 4242);
  EXPECT_EQ(processes[2].memory_bytes, int64_t{500} << 20);
}

TEST(GpuParse, WhatIsNotARecordIsSkipped) {
  EXPECT_TRUE(parseGpuDevices("NVIDIA-SMI has failed because it couldn't communicate with the "
                              "NVIDIA driver.\n")
                  .empty());
  EXPECT_TRUE(parseGpuDevices("0, GPU-1, [N/A], 10, 20\n0, GPU-1, 101, 10, 20\n").empty());
  EXPECT_TRUE(parseGpuProcesses("-1, GPU-1, 5\n12, GPU\"x, 5\n12, GPU-1, [N/A]\n\n").empty());
  EXPECT_EQ(parseGpuProcesses("12 , GPU-1 , 5 \r\n").size(), 1u);
}

TEST(GpuParse, EachRankGetsItsProcessesMemoryAndItsBusiestGpu) {
  // Ranks lead process groups 4242 and 4240; 4243 is rank 4240's DataLoader worker; 999 is
  // not this node's.
  auto use = gpuUseByGroup(parseGpuDevices(kDevices), parseGpuProcesses(kProcesses),
                           {{4242, 4242}, {4240, 4240}, {4243, 4240}});
  ASSERT_EQ(use.size(), 2u);
  EXPECT_EQ(use[4242].memory_bytes, int64_t{30000} << 20);
  EXPECT_EQ(use[4242].utilization, 87);
  EXPECT_EQ(use[4240].memory_bytes, int64_t{700} << 20);
  EXPECT_EQ(use[4240].utilization, 87);
}

// A stand-in nvidia-smi on a PATH of its own.
class FakeNvidiaSmi : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cohort-gpu-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto loop = proc::EventLoop::create();
    ASSERT_TRUE(loop);
    loop_ = std::move(*loop);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  void script(const std::string& body) {
    const std::string path = dir_ + "/nvidia-smi";
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  }
  // Runs the loop until `done` or `deadline`, polling the sampler every 50 ms.
  bool runUntil(GpuSampler& sampler, const std::function<bool()>& done, Millis deadline) {
    const auto until = std::chrono::steady_clock::now() + deadline;
    auto timer = proc::Timer::create();
    if (!timer) return false;
    bool ok = false;
    (void)loop_->add(timer->fd(), EPOLLIN, [&](uint32_t) {
      timer->consume();
      sampler.poll();
      if (done() || std::chrono::steady_clock::now() > until) {
        ok = done();
        loop_->quit();
        return;
      }
      timer->arm(Millis(50));
    });
    timer->arm(Millis(1));
    (void)loop_->run();
    loop_->remove(timer->fd());
    return ok;
  }
  std::string dir_;
  std::unique_ptr<proc::EventLoop> loop_;
};

TEST_F(FakeNvidiaSmi, BothQueriesAreAnsweredThroughTheLoop) {
  script(std::string("case \"$1\" in\n--query-gpu=*) printf '") + kDevices +
         "';;\n--query-compute-apps=*) printf '" + kProcesses + "';;\nesac\n");
  int reaped = 0;
  GpuSampler sampler(*loop_, dir_, [&] { ++reaped; });
  ASSERT_TRUE(sampler.available());
  ASSERT_TRUE(runUntil(
      sampler, [&] { return sampler.latest().has_value(); }, Millis(10000)));
  EXPECT_EQ(sampler.latest()->first.size(), 2u);
  EXPECT_EQ(sampler.latest()->second.size(), 4u);
  EXPECT_EQ(reaped, 2);
}

TEST_F(FakeNvidiaSmi, AHungQueryIsKilledAtItsDeadlineWithoutWaitingForItAndGivenUpOnAtLast) {
  script("exec sleep 600\n");
  GpuSampler sampler(*loop_, dir_, nullptr);
  ASSERT_TRUE(sampler.available());
  const auto t0 = std::chrono::steady_clock::now();
  // Each poll returns at once: the loop's timer keeps its 50 ms pace however long nvidia-smi
  // hangs, and after kFailuresToGiveUp deadlines the sampler stops trying.
  ASSERT_TRUE(runUntil(
      sampler, [&] { return !sampler.available(); }, Millis(30000)));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, GpuSampler::kDeadline * GpuSampler::kFailuresToGiveUp);
  EXPECT_LT(took, GpuSampler::kDeadline * (GpuSampler::kFailuresToGiveUp + 1));
  EXPECT_FALSE(sampler.latest());
}

TEST(GpuSampler, WithoutNvidiaSmiOnPathItDoesNothing) {
  auto loop = proc::EventLoop::create();
  ASSERT_TRUE(loop);
  GpuSampler sampler(**loop, "/nonexistent", nullptr);
  EXPECT_FALSE(sampler.available());
  sampler.poll();
  EXPECT_FALSE(sampler.latest());
}

}  // namespace
}  // namespace cohort::agent
