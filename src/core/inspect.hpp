// backend::inspect's backend-neutral part: the view of a lock over several servers (Redlock)
// from each server's own view.
#pragma once

#include <cstddef>
#include <string>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>

namespace dlock::detail {

/// The quorum view of lock `name` from `views` (one per server, in order; a server that could
/// not be read has `error` set), as lock_info documents for several servers: held on at least
/// `quorum` servers, the type most held servers (else most servers) show, counts and lease_left
/// the quorum-th largest, fencing_counter / waiters / subscribers the largest. The result's
/// `servers` are `views`. Fewer than `quorum` servers read: errc::quorum_unreachable naming each
/// failure, and an empty lock_info.
lock_info merge_views(const std::string& name, std::vector<lock_info> views, std::size_t quorum,
                      std::error_code& ec);

}  // namespace dlock::detail
