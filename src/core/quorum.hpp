// Quorum arithmetic over per-server replies, for acquire, renew and release (Redlock with N
// servers; one server is the case N = 1, quorum 1). Pure: the engine turns each server's reply or
// failure into a vote and acts on the verdict. docs/redlock.md states the rules and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/renewal.hpp"
#include "core/time.hpp"

namespace dlock::detail::quorum {

/// A majority of `servers`.
constexpr std::size_t majority(std::size_t servers) noexcept { return servers / 2 + 1; }

// ---- acquire -------------------------------------------------------------------------------

/// One server's answer to an acquire script.
struct acquire_vote {
    enum class kind : std::uint8_t {
        granted,  ///< it set our key; `counter` is its fencing counter
        held,     ///< someone else holds it there; `holder_ms` (-1 unknown), `ticket` (0 none)
        failed,   ///< no usable answer (unreachable, timed out, error reply, not counted)
    };
    kind what = kind::failed;
    std::int64_t counter = 0;
    std::int64_t holder_ms = -1;
    std::uint64_t ticket = 0;
};

struct acquire_tally {
    std::size_t servers = 0;
    std::size_t granting = 0;
    std::size_t holding = 0;
    std::size_t failed = 0;
    std::int64_t holder_ms = -1;  ///< smallest remaining lease among holding servers; -1 unknown
    std::uint64_t ticket = 0;     ///< a queued waiter's ticket (the last one reported)
    std::int64_t fence = 0;       ///< the highest counter among granting servers
    std::size_t at_fence = 0;     ///< granting servers whose counter equals `fence`
    /// Every server not known to hold a counter of `fence` (granting below it, holding, failed):
    /// where the fencing write-back runs. A failed server may have set our key after all, and
    /// the raise refuses where another owner holds the lock.
    std::vector<std::size_t> behind;
    /// Of `behind`, the granting servers whose counter is below `fence` (restarted without their
    /// data, or down during earlier grants). They are raised even when the fence is agreed, so
    /// the highest counter is back on every answering server before another one can lose it.
    std::vector<std::size_t> lagging;

    /// A majority set our key.
    bool majority_granted() const noexcept { return granting >= majority(servers); }
    /// Enough answers for a verdict either way: otherwise no quorum could be reached.
    bool reached() const noexcept { return granting + holding >= majority(servers); }
    /// The fencing token counts once a majority holds a counter >= it (docs/redlock.md,
    /// "Fencing tokens across independent counters"); `raised`: write-backs that succeeded.
    bool fence_agreed(std::size_t raised = 0) const noexcept {
        return at_fence + raised >= majority(servers);
    }
};

acquire_tally tally_acquire(std::span<const acquire_vote> votes);

/// Until when a grant sent at `sent` with `lease` may be trusted: every granting server set its
/// expiry at or after `sent`, so the minimum over them is at least sent + lease; minus the drift
/// margin. The elapsed time is the caller's check: the grant counts only if now < this.
inline steady::time_point grant_validity(steady::time_point sent, milliseconds lease,
                                         drift_model drift) noexcept {
    return valid_until(sent, lease, drift);
}

enum class acquire_verdict : std::uint8_t {
    granted,      ///< a majority granted, the fence is agreed and the validity not yet passed
    contended,    ///< a majority answered, not all for us (or the grant came too late)
    unreachable,  ///< fewer than a majority answered at all
};

/// The verdict at `now`, after any fencing write-back (`raised` servers caught up).
acquire_verdict decide_acquire(const acquire_tally& t, std::size_t raised, steady::time_point now,
                               steady::time_point validity) noexcept;

// ---- renew and release ----------------------------------------------------------------------

/// One server's answer to a renew or release script: 1 (ours: extended / deleted), 0 (not ours:
/// gone), < 0 (taken: another owner's token is there), or no usable answer. Servers whose votes
/// do not count are left out.
enum class owner_vote : std::uint8_t { ours, not_ours, taken, failed };

struct owner_tally {
    std::size_t servers = 0;
    std::size_t ours = 0;
    std::size_t not_ours = 0;  ///< gone or taken: every vote that is not ours and not failed
    std::size_t taken = 0;     ///< of not_ours, the servers holding another owner's token
    std::size_t failed = 0;
};

/// The vote for a script's integer reply: 1 ours, < 0 taken, otherwise (0) not ours.
constexpr owner_vote owner_vote_of(std::int64_t reply) noexcept {
    return reply == 1 ? owner_vote::ours : reply < 0 ? owner_vote::taken : owner_vote::not_ours;
}

owner_tally tally_owner(std::span<const owner_vote> votes, std::size_t servers);

enum class renew_verdict : std::uint8_t {
    renewed,  ///< a majority extended it
    lost,     ///< more than N - quorum said not ours: the servers still holding it are too few
    failed,   ///< undecided (servers unreachable): retry until the lease runs out
};
renew_verdict decide_renew(const owner_tally& t) noexcept;

enum class release_verdict : std::uint8_t {
    released,  ///< some server deleted it and no majority says it was gone before
    lost,      ///< the grant had been lost before this release (more than N - quorum not ours)
    failed,    ///< undecided: the unreachable servers keep the key until it expires
};
/// The renewal rule applied to release: with more than N - quorum servers answering "not ours",
/// the servers that still held our key could not have formed a quorum, so the grant had been
/// lost, whatever one server deleted.
release_verdict decide_release(const owner_tally& t) noexcept;

// ---- record_once ---------------------------------------------------------------------------

/// What one server said of a record: `stored` unset when it stores none. `answered` false: no
/// usable answer (unreachable, error, or a server whose vote does not count).
struct record_read {
    bool answered = false;
    std::optional<std::string> stored{};
};

/// The next step of record_once over `reads` (one per server, all N). docs/redlock.md, "Records".
struct record_step {
    enum class kind : std::uint8_t {
        /// `value` is stored on a majority of ALL servers: it is the answer. `to`: the answering
        /// servers that store another value or none (the write-back).
        agreed,
        /// No answering server stores anything and a majority answered: store `value` (the
        /// caller's) on `to` (every answering server), if still absent there, then decide again.
        first_write,
        /// Fewer than a majority answered.
        unreachable,
        /// A majority answered, some store a value, but no value is on a majority: no answer is
        /// safe (a lone value on a minority may be a survivor of restarts or a first write that
        /// failed half-way; two values a race of first writers). Nothing is written.
        undecided,
    };
    kind what = kind::unreachable;
    std::string value{};
    std::vector<std::size_t> to{};
};

/// The verdict on `reads` for a caller proposing `mine`. A value once on a majority stays the
/// only possible `agreed` answer as long as, at every later call, one server that answers still
/// stores it: no value is ever written where another one is seen unless a majority agrees on
/// the value written, and a first write needs every answering server empty.
record_step decide_record(std::span<const record_read> reads, std::string_view mine);

}  // namespace dlock::detail::quorum
