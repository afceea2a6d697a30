// The backend of conformance_redis_single_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<redis_single> t;
    return t;
}

}  // namespace dlock::test::conformance
