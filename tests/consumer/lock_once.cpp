// A program outside the dlock tree, built against an installed dlock (tests/consumer/run.sh):
// locks and unlocks one dlock::mutex on the Redis server at argv[1] and, given argv[2], on the
// etcd member at argv[2] (dlock::etcd), and checks that every grant carried a fencing token.
// Exit 0 when they did; 1 with one line on stderr otherwise.
#include <dlock/dlock.hpp>
#include <dlock/etcd/client.hpp>
#include <dlock/redis/client.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

namespace {

// Locks and unlocks one dlock::mutex on `backend`; its fencing token, 0 when not granted.
std::uint64_t lock_once(dlock::backend& backend, const char* what) {
    using namespace std::chrono_literals;
    dlock::mutex m(backend, "consumer/lock-once");
    if (!m.try_lock_for(10s)) {
        std::fprintf(stderr, "lock_once: %s: the lock was not granted within 10 s\n", what);
        return 0;
    }
    const std::uint64_t token = m.fencing_token();
    m.unlock();
    if (token == 0) std::fprintf(stderr, "lock_once: %s: granted with fencing token 0\n", what);
    return token;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2 && argc != 3) {
        std::fprintf(stderr, "usage: %s redis://127.0.0.1:PORT [etcd://127.0.0.1:PORT]\n", argv[0]);
        return 2;
    }
    try {
        dlock::redis::client_options options;
        options.url = argv[1];
        dlock::redis::client redis(std::move(options));
        const std::uint64_t token = lock_once(redis, "redis");
        if (token == 0) return 1;
        std::printf("lock_once: locked and unlocked with fencing token %llu (dlock %s)",
                    static_cast<unsigned long long>(token), DLOCK_VERSION_STRING);
        if (argc == 3) {
            dlock::etcd::client_options etcd_options;
            etcd_options.url = argv[2];
            dlock::etcd::client etcd(std::move(etcd_options));
            const std::uint64_t etcd_token = lock_once(etcd, "etcd");
            if (etcd_token == 0) return 1;
            std::printf("; on etcd with fencing token %llu",
                        static_cast<unsigned long long>(etcd_token));
        }
        std::printf("\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lock_once: %s\n", e.what());
        return 1;
    }
}
