// The one header a user's conformance test includes: the suite and its
// KVCHECK_CONFORMANCE_MAIN(name, maker) (docs/ENGINES.md).
#pragma once

#include "conformance/suite.h"
