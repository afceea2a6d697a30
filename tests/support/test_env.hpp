// Test-environment helpers shared by the unit, integration and fault tests: the one time scale
// (DLOCK_TEST_TIME_SCALE, as in Curator's `Timing`), deadline-bounded waiting instead of bare
// sleeps, unique key names per test, and free loopback ports. All functions are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace dlock::test {

/// The factor every test duration is multiplied by: the environment variable DLOCK_TEST_TIME_SCALE
/// (read once). Missing, unparsable, non-finite or <= 0 values give 1.0. Sanitizer runs set it > 1.
double time_scale();

/// `d * time_scale()`, rounded to the nearest millisecond (never below 0).
std::chrono::milliseconds scaled(std::chrono::milliseconds d);

/// Calls `pred` until it returns true or `scaled(timeout)` has passed, sleeping 2 ms at first and
/// at most 10 ms between calls. Returns the last value of `pred()`; `pred` is always called at
/// least once, and once more at or after the deadline. Use as
/// `EXPECT_TRUE(eventually([&] { return ...; }, 5s));`.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

/// A name unique within the run and across concurrently running test binaries:
/// "<TestSuite>.<TestName>/<hint>/<pid>.<counter>" from gtest's current test ("no_test" outside a
/// test); the "/<hint>" part is left out when `hint` is empty. Use it as a key prefix.
std::string unique_name(std::string_view hint = "");

/// A port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close). Another
/// process may take it before you bind it, so callers retry on "address in use".
/// Throws std::runtime_error if no socket can be bound.
std::uint16_t free_port();

/// Runs `start` (it picks ports with free_port() and starts servers on them, and throws when one
/// fails) until it returns. When it throws and `port_taken()` says another process bound one of
/// its ports first (the race free_port() leaves open), `clean_up()` undoes the attempt and `start`
/// runs again on new ports, up to `attempts` times in all; any other failure, or the last one, is
/// rethrown after `clean_up()`.
void start_on_free_ports(const std::function<void()>& start,
                         const std::function<bool()>& port_taken,
                         const std::function<void()>& clean_up, int attempts = 5);

}  // namespace dlock::test
