// The backend of conformance_memory_test.
#include "backends.hpp"

namespace dlock::test::conformance {

const service_traits& service() {
    static const traits<memory> t;
    return t;
}

}  // namespace dlock::test::conformance
