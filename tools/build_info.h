// What build of kvcheck is running: the project's version and the git commit
// it was built from ("-dirty" with uncommitted changes; "unknown" outside a
// checkout). Reports record both, so a result names the code that made it.
#pragma once

namespace kvcheck::cli {

const char* build_version();
const char* build_commit();

}  // namespace kvcheck::cli
