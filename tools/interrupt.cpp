#include "tools/interrupt.h"

#include <signal.h>

#include <atomic>

namespace kvcheck::cli {

namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int {
}, g_old_term{};

void on_signal(int sig) {
  g_signal.store(sig);
  // The next one is not caught: a run that does not stop can still be ended.
  signal(sig, SIG_DFL);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &g_old_int);
  sigaction(SIGTERM, &action, &g_old_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int interrupted() {
  return g_signal.load();
}

int interrupted_exit_code() {
  return 128 + g_signal.load();
}

}  // namespace kvcheck::cli
