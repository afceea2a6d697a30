// A program outside the dlock tree, built against an installed dlock (tests/consumer/run.sh):
// locks and unlocks one dlock::mutex on the Redis server at argv[1] and checks that the grant
// carried a fencing token. Exit 0 when it did; 1 with one line on stderr otherwise.
#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s redis://127.0.0.1:PORT\n", argv[0]);
        return 2;
    }
    try {
        using namespace std::chrono_literals;
        dlock::redis::client_options options;
        options.url = argv[1];
        dlock::redis::client redis(std::move(options));
        dlock::mutex m(redis, "consumer/lock-once");
        if (!m.try_lock_for(10s)) {
            std::fprintf(stderr, "lock_once: the lock was not granted within 10 s\n");
            return 1;
        }
        const std::uint64_t token = m.fencing_token();
        m.unlock();
        if (token == 0) {
            std::fprintf(stderr, "lock_once: granted with fencing token 0\n");
            return 1;
        }
        std::printf("lock_once: locked and unlocked with fencing token %llu (dlock %s)\n",
                    static_cast<unsigned long long>(token), DLOCK_VERSION_STRING);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lock_once: %s\n", e.what());
        return 1;
    }
}
