// The backend of conformance_etcd_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<etcd> t;
    return t;
}

}  // namespace dlock::test::conformance
