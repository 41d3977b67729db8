// ChildProcess names the request a child died on: the oldest one it has not
// answered, even when kvcheck finds it gone while writing a later one (a
// destroy sent after a step the child was still computing).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "backends/exec/exec_child.h"

namespace kvcheck {
namespace {

TEST(ExecChild, AChildGoneWhileALaterRequestIsWrittenIsReportedAtTheRequestInFlight) {
  // Reads nothing, exits 3 a moment later: the step it was sent is in flight.
  ChildProcess child("sh -c 'sleep 0.2; exit 3'", ChildWaits{});
  child.post({{"op", "step"}, {"engine", 1}}, /*refusal_matters=*/true);
  child.send();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  child.post({{"op", "destroy"}, {"engine", 1}}, /*refusal_matters=*/false);
  std::string message;
  try {
    child.drain();
  } catch (const ChildFault& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(": step: the child exited with code 3"), std::string::npos) << message;
  EXPECT_EQ(message.find("destroy"), std::string::npos) << message;
  EXPECT_EQ(child.exit_code(), 3);
}

// A child that printed to stdout and whose own child keeps the pipes open
// (`sh -c 'sleep 20 & echo ...; wait'`): kvcheck reports it at once, not when the
// grandchild ends (it used to read stderr until end of file).
TEST(ExecChild, AGrandchildHoldingThePipesDoesNotHoldKvcheck) {
  ChildProcess child("sh -c 'sleep 20 & echo Hello world; wait'", ChildWaits{});
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    child.call({{"op", "hello"}}, {});
  } catch (const ChildFault& e) {
    message = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(message.find("read as text (\"Hello world...\")"), std::string::npos) << message;
}

TEST(ExecChild, TheShellsCodeSaysACommandCouldNotStart) {
  ChildProcess child("/nonexistent-kvcheck/binary", ChildWaits{});
  EXPECT_THROW(child.call({{"op", "hello"}}, {}), ChildFault);
  EXPECT_EQ(child.exit_code(), 127);
}

}  // namespace
}  // namespace kvcheck
