#include "redis/acquire_rules.hpp"

#include <algorithm>
#include <charconv>

#include "core/quorum.hpp"
#include "redis/protocol.hpp"

namespace dlock::redis::detail {

std::optional<handoff_message> parse_handoff(std::string_view m) {
    constexpr std::string_view granted = "granted ";
    if (!m.starts_with(granted)) return std::nullopt;
    m.remove_prefix(granted.size());
    const auto last = m.rfind(' ');
    if (last == std::string_view::npos) return std::nullopt;
    const auto token = m.substr(last + 1);
    m = m.substr(0, last);
    const auto space = m.find(' ');
    if (space == std::string_view::npos || token.empty()) return std::nullopt;
    const auto number = [](std::string_view text) -> std::optional<std::uint64_t> {
        std::uint64_t v = 0;
        const auto* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec != std::errc() || p != end || text.empty()) return std::nullopt;
        return v;
    };
    const auto fence = number(m.substr(0, space));
    const auto ticket = number(m.substr(space + 1));
    if (!fence || !ticket) return std::nullopt;
    return handoff_message{*fence, *ticket, token};
}

std::string_view handoff_client(std::string_view token) noexcept {
    return token.substr(0, token.rfind('.'));
}

void handoff_ticket::not_yet(std::uint64_t ticket, steady::time_point sent,
                             std::chrono::milliseconds lease) noexcept {
    ticket_ = ticket;
    highest_ = std::max(highest_, ticket);
    refreshed_at_ = sent;
    refresh_lease_ = lease;
}

std::optional<handoff_grant> handoff_ticket::accept(std::string_view message,
                                                    std::string_view token, steady::time_point now,
                                                    dlock::detail::drift_model drift) const {
    const auto parsed = parse_handoff(message);
    if (!parsed || ticket_ == 0 || parsed->ticket != ticket_ || parsed->token != token)
        return std::nullopt;
    const auto bound = std::min(refresh_lease_, handoff_lease);
    const auto valid = dlock::detail::valid_until(refreshed_at_, bound, drift);
    if (now >= valid) return std::nullopt;
    return handoff_grant{parsed->fence, refreshed_at_, valid};
}

void quorum_handoff::not_yet(std::size_t node, std::uint64_t ticket, steady::time_point sent,
                             std::chrono::milliseconds lease) noexcept {
    tickets_.at(node).not_yet(ticket, sent, lease);
}

void quorum_handoff::forget() noexcept {
    for (auto& t : tickets_) t.not_yet(0, steady::time_point::min(), std::chrono::milliseconds{0});
}

std::uint64_t quorum_handoff::floor() const noexcept {
    std::uint64_t highest = 0;
    for (const auto& t : tickets_) highest = std::max(highest, t.floor());
    return highest;
}

std::vector<handoff_grant> quorum_handoff::accepted(const std::vector<std::string>& messages,
                                                    std::string_view token, steady::time_point now,
                                                    dlock::detail::drift_model drift) const {
    std::vector<handoff_grant> grants;
    for (std::size_t i = 0; i < tickets_.size() && i < messages.size(); ++i) {
        if (const auto grant = tickets_[i].accept(messages[i], token, now, drift))
            grants.push_back(*grant);
    }
    return grants;
}

std::optional<handoff_grant> quorum_handoff::accept(const std::vector<std::string>& messages,
                                                    std::string_view token, steady::time_point now,
                                                    dlock::detail::drift_model drift) const {
    const auto grants = accepted(messages, token, now, drift);
    if (grants.empty() || grants.size() < dlock::detail::quorum::majority(tickets_.size()))
        return std::nullopt;
    auto all = grants.front();
    for (const auto& g : grants) {
        if (g.fence != all.fence) return std::nullopt;  // an attempt writes back
        all.sent = std::min(all.sent, g.sent);
        all.valid_until = std::min(all.valid_until, g.valid_until);
    }
    return all;
}

std::size_t quorum_handoff::granting(const std::vector<std::string>& messages,
                                     std::string_view token, steady::time_point now,
                                     dlock::detail::drift_model drift) const {
    return accepted(messages, token, now, drift).size();
}

steady::time_point retry_at(steady::time_point now, const contention& found,
                            std::chrono::milliseconds lease, bool keeps_entry_alive,
                            std::chrono::milliseconds node_timeout, jitter_source jitter) {
    auto fallback = found.holder_ms >= 0 ? std::chrono::milliseconds(found.holder_ms) : lease;
    if (keeps_entry_alive) fallback = std::min(fallback, waiter_liveness / 3);
    auto at =
        dlock::detail::deadline_after(now, fallback) + std::chrono::nanoseconds(jitter(2'000'000));
    if (found.granting > 0) {
        const auto spread =
            std::chrono::duration_cast<std::chrono::nanoseconds>(2 * node_timeout).count();
        at = std::min(at, now + std::chrono::nanoseconds(jitter(spread)));
    }
    return at;
}

}  // namespace dlock::redis::detail
