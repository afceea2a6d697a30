// dlock::version() and dlock::compiled_backends() (<dlock/version.hpp>): the library's own
// account of its version and backends agrees with the headers it was built with.
#include <dlock/version.hpp>

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace {

TEST(Version, IsTheVersionOfTheHeadersItWasBuiltWith) {
    EXPECT_EQ(dlock::version(), DLOCK_VERSION_STRING);
    EXPECT_EQ(std::string(dlock::version()), std::to_string(DLOCK_VERSION_MAJOR) + "." +
                                                 std::to_string(DLOCK_VERSION_MINOR) + "." +
                                                 std::to_string(DLOCK_VERSION_PATCH));
}

TEST(Version, CompiledBackendsAreThoseOfConfigHpp) {
    std::vector<std::string_view> expected;
#if DLOCK_HAS_REDIS
    expected.push_back("redis");
    expected.push_back("redlock");
#endif
#if DLOCK_HAS_ZOOKEEPER
    expected.push_back("zookeeper");
#endif
#if DLOCK_HAS_ETCD
    expected.push_back("etcd");
#endif
    const auto backends = dlock::compiled_backends();
    EXPECT_EQ(std::vector<std::string_view>(backends.begin(), backends.end()), expected);
}

}  // namespace
