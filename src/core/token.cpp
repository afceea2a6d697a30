#include "core/token.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <random>
#include <system_error>

namespace dlock::detail {

namespace {

void fill_random(unsigned char* bytes, std::size_t size) {
    std::size_t filled = 0;
    while (filled < size) {
        const ssize_t n = ::getrandom(bytes + filled, size - filled, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw std::system_error(errno, std::generic_category(), "getrandom");
        }
        filled += static_cast<std::size_t>(n);
    }
}

// Raised in a child right after fork(2): the child's copy of its thread's random bytes is the
// parent's too, so they must not be used there.
std::atomic<std::uint64_t> fork_generation{0};

// The kernel's random bytes for 32 tokens at a time, per thread: one getrandom(2) per 32 grants
// instead of one per grant. Bytes are taken once and never shared between threads or across a
// fork, so each token is still 128 bits nobody else has.
struct random_pool {
    std::array<unsigned char, 512> bytes{};
    std::size_t used = bytes.size();
    std::uint64_t generation = 0;
};

}  // namespace

std::string random_token() {
    static const bool forks_watched = [] {
        ::pthread_atfork(nullptr, nullptr, [] { fork_generation.fetch_add(1); });
        return true;
    }();
    (void)forks_watched;
    thread_local random_pool pool;
    constexpr std::size_t size = 16;
    const auto generation = fork_generation.load();
    if (pool.used + size > pool.bytes.size() || pool.generation != generation) {
        fill_random(pool.bytes.data(), pool.bytes.size());
        pool.used = 0;
        pool.generation = generation;
    }
    const unsigned char* bytes = pool.bytes.data() + pool.used;
    static constexpr char digits[] = "0123456789abcdef";
    std::string token(size * 2, '0');
    for (std::size_t i = 0; i < size; ++i) {
        token[2 * i] = digits[bytes[i] >> 4];
        token[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    // Wiped once given out: the pool holds only bytes no token has used yet.
    std::fill_n(pool.bytes.data() + pool.used, size, 0);
    pool.used += size;
    return token;
}

long long random_jitter_ns(long long bound_ns) noexcept {
    if (bound_ns <= 0) return 0;
    // Jitter only spreads retries apart; a per-thread PRNG seeded once from getrandom is enough.
    thread_local std::mt19937_64 engine = [] {
        std::uint64_t seed = 0;
        if (::getrandom(&seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed))
            seed = 0x9e3779b97f4a7c15ull;
        return std::mt19937_64(seed);
    }();
    return std::uniform_int_distribution<long long>(0, bound_ns)(engine);
}

}  // namespace dlock::detail
