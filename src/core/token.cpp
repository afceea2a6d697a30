#include "core/token.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <random>
#include <system_error>

namespace dlock::detail {

std::string random_token() {
    std::array<unsigned char, 16> bytes{};
    std::size_t filled = 0;
    while (filled < bytes.size()) {
        const ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw std::system_error(errno, std::generic_category(), "getrandom");
        }
        filled += static_cast<std::size_t>(n);
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string token(bytes.size() * 2, '0');
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        token[2 * i] = digits[bytes[i] >> 4];
        token[2 * i + 1] = digits[bytes[i] & 0xf];
    }
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
