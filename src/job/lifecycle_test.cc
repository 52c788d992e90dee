// The job lifecycle's rules (lifecycle.h), one test each: what every input does in every state.
#include "job/lifecycle.h"

#include <gtest/gtest.h>

#include "job/state.h"

namespace cohort::job {
namespace {

constexpr JobInput kInputs[] = {JobInput::kStarted, JobInput::kStartFailed, JobInput::kStopAsked,
                                JobInput::kReported, JobInput::kCoordinatorGone};
constexpr JobState kStarted[] = {JobState::kStarting, JobState::kStaging, JobState::kRunning,
                                 JobState::kRestarting, JobState::kStopping};

TEST(Lifecycle, NamesRoundTripAndTheListIsTheStoresList) {
  std::vector<std::string> names;
  for (JobState s : kAllJobStates) {
    names.emplace_back(stateName(s));
    EXPECT_EQ(parseJobState(stateName(s)), s);
  }
  EXPECT_EQ(names, kJobStates);
  EXPECT_EQ(parseJobState("Running"), std::nullopt);
  EXPECT_EQ(parseJobState(""), std::nullopt);
  EXPECT_TRUE(isFinalState("failed"));
  EXPECT_FALSE(isFinalState("stopping"));
  EXPECT_FALSE(isFinalState("bogus"));
}

TEST(Lifecycle, Rule1AFinalStateIsFinal) {
  for (JobState final_state : {JobState::kSucceeded, JobState::kFailed, JobState::kStopped}) {
    for (JobInput input : kInputs) {
      for (JobState reported : kAllJobStates) {
        EXPECT_EQ(nextState(final_state, input, reported), std::nullopt)
            << stateName(final_state) << " moved";
      }
    }
  }
}

TEST(Lifecycle, Rule2AQueuedJobStartsOrIsStoppedOrFailsToStart) {
  EXPECT_EQ(nextState(JobState::kQueued, JobInput::kStarted), JobState::kStarting);
  EXPECT_EQ(nextState(JobState::kQueued, JobInput::kStopAsked), JobState::kStopped);
  EXPECT_EQ(nextState(JobState::kQueued, JobInput::kStartFailed), JobState::kFailed);
  EXPECT_EQ(nextState(JobState::kQueued, JobInput::kReported, JobState::kRunning), std::nullopt);
  EXPECT_EQ(nextState(JobState::kQueued, JobInput::kCoordinatorGone), std::nullopt);
}

TEST(Lifecycle, Rule3AStartedJobThatCannotStartFails) {
  for (JobState s : kStarted) {
    EXPECT_EQ(nextState(s, JobInput::kStartFailed), JobState::kFailed) << stateName(s);
    EXPECT_EQ(nextState(s, JobInput::kStarted), std::nullopt) << stateName(s);
  }
}

TEST(Lifecycle, Rule4AStopMakesAStartedJobStoppingOnce) {
  for (JobState s : kStarted) {
    EXPECT_EQ(nextState(s, JobInput::kStopAsked),
              s == JobState::kStopping ? std::nullopt : std::optional(JobState::kStopping))
        << stateName(s);
  }
}

TEST(Lifecycle, Rule5TheCoordinatorsWordMovesAStartedJobButNeverBackToQueued) {
  EXPECT_EQ(nextState(JobState::kStarting, JobInput::kReported, JobState::kStaging),
            JobState::kStaging);
  EXPECT_EQ(nextState(JobState::kRunning, JobInput::kReported, JobState::kRestarting),
            JobState::kRestarting);
  EXPECT_EQ(nextState(JobState::kRestarting, JobInput::kReported, JobState::kRunning),
            JobState::kRunning);
  EXPECT_EQ(nextState(JobState::kRunning, JobInput::kReported, JobState::kSucceeded),
            JobState::kSucceeded);
  EXPECT_EQ(nextState(JobState::kRunning, JobInput::kReported, JobState::kRunning), std::nullopt);
  EXPECT_EQ(nextState(JobState::kRunning, JobInput::kReported, JobState::kQueued), std::nullopt);
  // Its own stop: running -> stopping as the coordinator says.
  EXPECT_EQ(nextState(JobState::kRunning, JobInput::kReported, JobState::kStopping),
            JobState::kStopping);
}

TEST(Lifecycle, Rule5AStoppingJobStaysStoppingUntilItsEnd) {
  for (JobState word : {JobState::kStarting, JobState::kStaging, JobState::kRunning,
                        JobState::kRestarting}) {
    EXPECT_EQ(nextState(JobState::kStopping, JobInput::kReported, word), std::nullopt)
        << stateName(word);
  }
  EXPECT_EQ(nextState(JobState::kStopping, JobInput::kReported, JobState::kStopped),
            JobState::kStopped);
  EXPECT_EQ(nextState(JobState::kStopping, JobInput::kReported, JobState::kFailed),
            JobState::kFailed);
}

TEST(Lifecycle, Rule6AJobWhoseCoordinatorIsGoneIsLostUnlessItWasStopping) {
  for (JobState s : kStarted) {
    EXPECT_EQ(nextState(s, JobInput::kCoordinatorGone),
              s == JobState::kStopping ? JobState::kStopped : JobState::kFailed)
        << stateName(s);
  }
}

}  // namespace
}  // namespace cohort::job
