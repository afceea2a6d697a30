// The backend of conformance_redlock_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<redlock> t;
    return t;
}

}  // namespace dlock::test::conformance
