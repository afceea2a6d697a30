// A client that was moved from keeps no state: each of its entry points must refuse with
// errc::invalid_argument naming the call, never dereference the moved state.
#pragma once

#include <dlock/backend.hpp>
#include <dlock/error.hpp>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <system_error>

namespace dlock::test {

/// Runs `call`, expecting dlock::error invalid_argument whose message says "<what> on a
/// moved-from client".
inline void expect_moved_from_error(const std::string& what, const std::function<void()>& call) {
    try {
        call();
        ADD_FAILURE() << what << " on a moved-from client did not throw";
    } catch (const dlock::error& e) {
        EXPECT_EQ(e.code(), dlock::errc::invalid_argument) << e.what();
        EXPECT_NE(std::string(e.what()).find(what + " on a moved-from client"), std::string::npos)
            << e.what();
    }
}

/// acquire, inspect, record_once and (where the backend has semaphores) set_permits on `moved`.
inline void expect_moved_from_refuses(dlock::backend& moved, bool has_permits) {
    expect_moved_from_error("acquire", [&] { auto l = moved.acquire("moved-from"); });
    expect_moved_from_error("inspect", [&] { auto info = moved.inspect("moved-from"); });
    expect_moved_from_error("record_once", [&] {
        std::error_code ec;
        (void)moved.record_once("moved-from", "1", ec);
        if (ec) throw dlock::error(ec, dlock::last_error_message(ec));
    });
    if (has_permits)
        expect_moved_from_error("set_permits", [&] { moved.set_permits("moved-from", 2); });
}

}  // namespace dlock::test
