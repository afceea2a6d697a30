// `dlock::redis::reply`: a decoded RESP2 reply, as returned by client::command(). A plain value
// type: copy it and share it like any std::vector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlock::redis {

struct reply {
    enum class kind { nil, integer, string, status, error, array };

    kind type = kind::nil;
    std::int64_t integer = 0;     ///< for kind::integer
    std::string text;             ///< for kind::string, status and error
    std::vector<reply> elements;  ///< for kind::array

    bool is_nil() const noexcept { return type == kind::nil; }
    bool is_error() const noexcept { return type == kind::error; }
};

const char* to_string(reply::kind kind) noexcept;

}  // namespace dlock::redis
