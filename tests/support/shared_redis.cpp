#include "shared_redis.hpp"

#include <memory>
#include <mutex>

namespace dlock::test {

namespace {
// Function-local statics: constructed on first use, destroyed by exit() (the server is killed and
// its dir removed). On abnormal exit PR_SET_PDEATHSIG kills it.
struct shared_state {
    std::mutex mutex;
    std::unique_ptr<redis_server> server;  // guarded by mutex
};
shared_state& state() {
    static shared_state s;
    return s;
}
}  // namespace

redis_server& shared_redis() {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    if (!s.server) s.server = std::make_unique<redis_server>();
    return *s.server;
}

namespace detail {
redis_server* shared_redis_if_started() {
    auto& s = state();
    std::lock_guard lock(s.mutex);
    return s.server.get();
}
}  // namespace detail

}  // namespace dlock::test
