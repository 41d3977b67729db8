// The example engine's conformance test: every kvcheck property, a case file
// for each failure, and --replay/--shrink of those files.
#include <kvcheck/conformance.h>

#include "kvcheck_front.h"

KVCHECK_CONFORMANCE_MAIN("own-engine", make_own_engine)
