#include <dlock/version.hpp>

#include <array>

namespace dlock {

std::string_view version() noexcept { return DLOCK_VERSION_STRING; }

std::span<const std::string_view> compiled_backends() noexcept {
    // This file is compiled with the <dlock/config.hpp> of the library's own build.
    static constexpr std::array<std::string_view,
                                2 * DLOCK_HAS_REDIS + DLOCK_HAS_ZOOKEEPER + DLOCK_HAS_ETCD>
        backends {
#if DLOCK_HAS_REDIS
        "redis", "redlock",
#endif
#if DLOCK_HAS_ZOOKEEPER
            "zookeeper",
#endif
#if DLOCK_HAS_ETCD
            "etcd",
#endif
    };
    return backends;
}

}  // namespace dlock
