// Owner tokens: 128 bits from getrandom(2), as 32 lowercase hex digits. Unguessable, so no other
// client can forge our token to release or extend our lock. Fresh for every grant. The bytes come
// 32 tokens at a time per thread (one system call per 32 grants), never reused across fork(2).
#pragma once

#include <string>

namespace dlock::detail {

/// Throws std::system_error if the kernel's random source fails (it does not block after boot).
std::string random_token();

/// A uniformly random duration in [0, bound_ns] nanoseconds, for retry jitter (not security).
long long random_jitter_ns(long long bound_ns) noexcept;

}  // namespace dlock::detail
