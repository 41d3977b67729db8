// wire::spin_until_ready, the poll both sides of the protocol spin on before
// they sleep: it sees a peer that answers within the spin, spins no longer
// than asked, and the default spins only where two CPUs can run the peers.
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "backends/exec/exec_wire.h"

namespace kvcheck::wire {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Pipe {
  Pipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~Pipe() { ::close(fds[0]), ::close(fds[1]); }
  int fds[2] = {-1, -1};
};

TEST(Spin, AnAnswerWithinTheSpinIsSeenWhenItComes) {
  Pipe pipe;
  std::thread peer([&] {
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(::write(pipe.fds[1], "x", 1), 1);
  });
  pollfd in{pipe.fds[0], POLLIN, 0};
  const auto start = Clock::now();
  const bool ready = spin_until_ready({&in, 1}, 30s);
  const auto waited = Clock::now() - start;
  peer.join();
  EXPECT_TRUE(ready);
  EXPECT_TRUE(in.revents & POLLIN);
  EXPECT_GE(waited, 19ms);  // it did wait for the answer...
  EXPECT_LT(waited, 20s);   // ...and not for the whole spin
}

TEST(Spin, NoAnswerEndsTheSpinAfterItsTimeAndNotBefore) {
  Pipe pipe;
  pollfd in{pipe.fds[0], POLLIN, 0};
  const auto start = Clock::now();
  EXPECT_FALSE(spin_until_ready({&in, 1}, 5ms));
  EXPECT_GE(Clock::now() - start, 5ms);
}

TEST(Spin, ZeroDoesNotPollAtAll) {
  Pipe pipe;
  ASSERT_EQ(::write(pipe.fds[1], "x", 1), 1);
  pollfd in{pipe.fds[0], POLLIN, 0};
  EXPECT_FALSE(spin_until_ready({&in, 1}, 0us));  // the caller sleeps in poll instead
  EXPECT_EQ(in.revents, 0);
  EXPECT_TRUE(spin_until_ready({&in, 1}, 1us));
}

TEST(Spin, TheDefaultSpinsOnlyWhereTwoCpusMayRunThePeers) {
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &all)) continue;
    CPU_SET(cpu, &one);
    break;
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  const auto on_one = default_spin();
  ASSERT_EQ(sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(on_one, 0us);
  EXPECT_EQ(default_spin(), CPU_COUNT(&all) >= 2 ? 100us : 0us);
}

}  // namespace
}  // namespace kvcheck::wire
