// One redis-server per test binary (servers start once per binary; each test uses its own
// key prefix from unique_name()).
#pragma once

#include "redis_server.hpp"

namespace dlock::test {

/// The binary's shared server: started on first use (thread-safe), killed and its dir removed
/// when the process exits normally, and by PR_SET_PDEATHSIG on abnormal exit. Tests must not
/// stop, pause or restart it — use a private redis_server for fault tests. Throws
/// std::runtime_error if the server cannot be started (later calls try again).
redis_server& shared_redis();

}  // namespace dlock::test

namespace dlock::test::detail {
/// The shared server if shared_redis() has started it, else nullptr (used by the end-of-binary
/// leak check in dlock_test_main).
redis_server* shared_redis_if_started();
}  // namespace dlock::test::detail
