// The backend of conformance_redis_tls_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<redis_tls> t;
    return t;
}

}  // namespace dlock::test::conformance
