// Ctrl-C and SIGTERM end a long run cleanly: the case in flight finishes or
// is abandoned, every report asked for is written and marked interrupted,
// scratch files go with their owners, and the exit status is the
// conventional 128 + signal. A second signal ends the process at once.
#pragma once

namespace kvcheck::cli {

// Installs the handlers for its lifetime (and restores the old ones).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
};

// The signal that arrived (SIGINT, SIGTERM), or 0.
int interrupted();

// 130 for SIGINT, 143 for SIGTERM: the status a shell gives a process the
// signal killed.
int interrupted_exit_code();

}  // namespace kvcheck::cli
