// Numbers on the command line. Durations: "500ms", "10s", "2m", "1h", compounds such as "1m30s",
// decimals such as "1.5s", and a plain number meaning seconds. Parsed without I/O; errors name the
// option and the value (cli_error with exit_status::usage).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace dlock::cli {

struct duration_rules {
    bool allow_forever = false;  ///< accept "forever" / "inf" (returned as dlock::forever)
    bool allow_zero = true;
};

/// Parses `text` given to `option` (e.g. "--wait"). Rounds to the nearest millisecond. Throws
/// cli_error(usage) for an empty, negative, malformed or absurdly large (> 10 years) value.
std::chrono::milliseconds parse_duration(std::string_view option, std::string_view text,
                                         duration_rules rules = {});

/// Parses the whole number `text` given to `option` (e.g. "--permits"): decimal digits only (no
/// sign, no hex or octal prefix, no exponent), in [low, high]. Throws cli_error(usage) naming the
/// option and the range otherwise (an overflowing number is out of range, not an internal error).
int parse_count(std::string_view option, std::string_view text, int low, int high);

/// Short human text: "850ms", "1.2s", "42s", "3m05s", "2h10m"; "forever" for dlock::forever.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace dlock::cli
