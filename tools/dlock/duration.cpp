#include "duration.hpp"

#include <dlock/options.hpp>

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "cli.hpp"

namespace dlock::cli {
namespace {

constexpr double max_ms = 10.0 * 365 * 24 * 3600 * 1000;  // 10 years: anything longer is a typo

struct unit {
    std::string_view suffix;
    double ms;
};
// Longest suffix first, so "ms" is not read as "m" followed by garbage.
constexpr unit units[] = {{"ms", 1.0}, {"s", 1000.0}, {"m", 60'000.0}, {"h", 3'600'000.0}};

[[noreturn]] void bad(std::string_view option, std::string_view text, std::string_view why) {
    throw cli_error(exit_status::usage, fmt::format("{} \"{}\": {}", option, text, why));
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view option, std::string_view text,
                                         duration_rules rules) {
    if (text.empty()) bad(option, text, "empty duration (use e.g. 500ms, 10s, 2m, 1h)");
    if (text == "forever" || text == "inf" || text == "infinity") {
        if (!rules.allow_forever) bad(option, text, "must be a finite duration");
        return dlock::forever;
    }
    if (text.front() == '-') bad(option, text, "must not be negative");

    const auto malformed = [&] {
        bad(option, text,
            "not a duration (use e.g. 500ms, 10s, 1.5s, 2m, 1h30m; a plain number is seconds)");
    };
    double total = 0;
    std::size_t i = 0;
    while (i < text.size()) {
        // A decimal number: digits, optionally a '.' and more digits.
        const std::size_t start = i;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
        if (i < text.size() && text[i] == '.') {
            ++i;
            while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
        }
        const std::string number(text.substr(start, i - start));
        if (number.empty() || number == ".") malformed();
        // Digits and at most one '.'. strtod, unlike stod, does not throw when the number is
        // beyond a double (400 digits): it gives HUGE_VAL, refused below as too large.
        const double value = std::strtod(number.c_str(), nullptr);
        if (i == text.size()) {
            if (start != 0) malformed();  // "1m30" : a unit is needed after the first part
            total = value * 1000.0;
            break;
        }
        const unit* matched = nullptr;
        for (const auto& u : units) {
            if (text.substr(i, u.suffix.size()) == u.suffix) {
                matched = &u;
                break;
            }
        }
        if (matched == nullptr) malformed();
        i += matched->suffix.size();
        total += value * matched->ms;
        if (total > max_ms) break;
    }
    if (!std::isfinite(total) || total > max_ms) bad(option, text, "too large (at most 10 years)");
    const auto ms = std::chrono::milliseconds(std::llround(total));
    if (!rules.allow_zero && ms <= std::chrono::milliseconds::zero()) {
        bad(option, text, "must be greater than zero");
    }
    return ms;
}

int parse_count(std::string_view option, std::string_view text, int low, int high) {
    const auto out_of_range = [&] {
        throw cli_error(exit_status::usage,
                        fmt::format("{} {}: must be a whole number between {} and {}", option,
                                    text.empty() ? "\"\"" : text, low, high));
    };
    if (text.empty()) out_of_range();
    long long value = 0;
    for (const char c : text) {
        if (!std::isdigit(static_cast<unsigned char>(c))) out_of_range();
        value = value * 10 + (c - '0');
        if (value > high) out_of_range();  // also stops before any overflow
    }
    if (value < low) out_of_range();
    return static_cast<int>(value);
}

std::string format_duration(std::chrono::milliseconds d) {
    if (d == dlock::forever) return "forever";
    const long long ms = d.count();
    // fmt rather than "-" + string: that prepend makes GCC 12 at -O3 report a false -Wrestrict.
    if (ms < 0) return fmt::format("-{}", format_duration(std::chrono::milliseconds(-ms)));
    if (ms < 1000) return fmt::format("{}ms", ms);
    if (ms < 10'000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000.0);
    const long long s = ms / 1000;
    if (s < 60) return fmt::format("{}s", s);
    if (s < 3600) {
        return s % 60 == 0 ? fmt::format("{}m", s / 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
    }
    const long long m = (s % 3600) / 60;
    return m == 0 ? fmt::format("{}h", s / 3600) : fmt::format("{}h{:02}m", s / 3600, m);
}

}  // namespace dlock::cli
