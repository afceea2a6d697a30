// The backend of conformance_zookeeper_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<zookeeper> t;
    return t;
}

}  // namespace dlock::test::conformance
