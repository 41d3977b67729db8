// How kvcheck waits on an exec: child: the per-call timeout and the spin
// before it sleeps come from the backend string, else the environment, else
// their defaults, and a bad value is refused naming where it came from.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "backends/exec/exec.h"
#include "backends/exec/exec_wire.h"
#include "model/status.h"
#include "tests/backends/saved_environment.h"

namespace kvcheck {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

ChildWaits waits_of(const std::string& backend) {
  return exec_waits(parse_backend_spec(backend));
}

std::string refusal_of(const std::string& backend) {
  try {
    waits_of(backend);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ExecWaits, TheBackendStringComesFirstThenTheEnvironmentThenTheDefaults) {
  test::SavedEnvironment saved({"KVCHECK_EXEC_TIMEOUT", "KVCHECK_EXEC_SPIN"});
  saved.clear();
  ChildWaits waits = waits_of("exec:engine");
  EXPECT_EQ(waits.timeout, milliseconds(30000));
  EXPECT_EQ(waits.spin, wire::default_spin());

  ::setenv("KVCHECK_EXEC_TIMEOUT", "2.5", 1);
  ::setenv("KVCHECK_EXEC_SPIN", "40", 1);
  waits = waits_of("exec:engine");
  EXPECT_EQ(waits.timeout, milliseconds(2500));
  EXPECT_EQ(waits.spin, microseconds(40));

  waits = waits_of("exec:engine --flag?timeout=7&spin=0");
  EXPECT_EQ(waits.timeout, milliseconds(7000));
  EXPECT_EQ(waits.spin, microseconds(0));
}

TEST(ExecWaits, ABadValueIsRefusedNamingItsFieldAndValue) {
  test::SavedEnvironment saved({"KVCHECK_EXEC_TIMEOUT", "KVCHECK_EXEC_SPIN"});
  saved.clear();
  EXPECT_EQ(refusal_of("exec:engine?spin=fast"),
            "--backend exec:engine: option spin=fast: expected microseconds in [0, 100000]");
  EXPECT_EQ(refusal_of("exec:engine?spin=-1"),
            "--backend exec:engine: option spin=-1: expected microseconds in [0, 100000]");
  EXPECT_EQ(refusal_of("exec:engine?spin=100001"),
            "--backend exec:engine: option spin=100001: expected microseconds in [0, 100000]");
  EXPECT_EQ(refusal_of("exec:engine?timeout=0"),
            "--backend exec:engine: option timeout=0: expected seconds in (0, 86400]");
  ::setenv("KVCHECK_EXEC_SPIN", "1e9", 1);
  EXPECT_EQ(refusal_of("exec:engine"),
            "KVCHECK_EXEC_SPIN=1e9: expected microseconds in [0, 100000]");
  EXPECT_EQ(waits_of("exec:engine?spin=100000").spin, microseconds(100000));
}

}  // namespace
}  // namespace kvcheck
