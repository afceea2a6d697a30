// The version of the dlock library a program runs with, and the backends that build of it has.
// With shared libraries the library loaded at run time can be newer than the headers the program
// was compiled with; those headers' version is DLOCK_VERSION_STRING (and DLOCK_VERSION_MAJOR,
// _MINOR, _PATCH) in <dlock/config.hpp>. Part of dlock::core.
#pragma once

#include <dlock/config.hpp>

#include <span>
#include <string_view>

namespace dlock {

/// "MAJOR.MINOR.PATCH" of the dlock library this program runs with, e.g. "0.1.0". Never empty.
std::string_view version() noexcept;

/// The backends compiled into the dlock library this program runs with, in this order:
/// "redis" and "redlock" (dlock::redis), "zookeeper" (dlock::zk). Empty for a build with no
/// backend (DLOCK_WITH_REDIS and DLOCK_WITH_ZOOKEEPER both OFF). The same set as the
/// DLOCK_HAS_* macros of <dlock/config.hpp> of that build; the view refers to static storage.
std::span<const std::string_view> compiled_backends() noexcept;

}  // namespace dlock
