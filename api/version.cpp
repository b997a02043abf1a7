// strata::version() (strata/strata.h): the project's version, set once in the top-level CMakeLists.txt.
#include "strata/strata.h"

namespace strata {
const char* version() {
  return STRATA_VERSION;
}
}  // namespace strata
