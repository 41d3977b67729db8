// Forwards to backends/exec/exec_reply.h, where the exec: transport now lives
// (issue 28, item 4). Kept only because fuzz/ still includes this path and is
// changed by another item of the same issue; delete once fuzz/ includes the
// new path.
#pragma once

#include "backends/exec/exec_reply.h"
