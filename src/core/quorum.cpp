#include "core/quorum.hpp"

#include <algorithm>

namespace dlock::detail::quorum {

acquire_tally tally_acquire(std::span<const acquire_vote> votes) {
    acquire_tally t;
    t.servers = votes.size();
    bool any_granted = false;
    for (const auto& v : votes) {
        switch (v.what) {
            case acquire_vote::kind::granted:
                ++t.granting;
                t.fence = any_granted ? std::max(t.fence, v.counter) : v.counter;
                any_granted = true;
                break;
            case acquire_vote::kind::held:
                ++t.holding;
                if (v.holder_ms >= 0 && (t.holder_ms < 0 || v.holder_ms < t.holder_ms))
                    t.holder_ms = v.holder_ms;
                if (v.ticket > 0) t.ticket = v.ticket;
                break;
            case acquire_vote::kind::failed: ++t.failed; break;
        }
    }
    for (std::size_t i = 0; i < votes.size(); ++i) {
        if (votes[i].what == acquire_vote::kind::granted && votes[i].counter == t.fence) {
            ++t.at_fence;
        } else {
            t.behind.push_back(i);
            if (votes[i].what == acquire_vote::kind::granted) t.lagging.push_back(i);
        }
    }
    return t;
}

acquire_verdict decide_acquire(const acquire_tally& t, std::size_t raised, steady::time_point now,
                               steady::time_point validity) noexcept {
    if (t.majority_granted() && t.fence_agreed(raised) && now < validity)
        return acquire_verdict::granted;
    return t.reached() ? acquire_verdict::contended : acquire_verdict::unreachable;
}

owner_tally tally_owner(std::span<const owner_vote> votes, std::size_t servers) {
    owner_tally t;
    t.servers = servers;
    for (const auto v : votes) {
        switch (v) {
            case owner_vote::ours: ++t.ours; break;
            case owner_vote::not_ours: ++t.not_ours; break;
            case owner_vote::taken:
                ++t.not_ours;
                ++t.taken;
                break;
            case owner_vote::failed: ++t.failed; break;
        }
    }
    return t;
}

renew_verdict decide_renew(const owner_tally& t) noexcept {
    if (t.ours >= majority(t.servers)) return renew_verdict::renewed;
    if (t.not_ours > t.servers - majority(t.servers)) return renew_verdict::lost;
    return renew_verdict::failed;
}

release_verdict decide_release(const owner_tally& t) noexcept {
    const auto tolerated = t.servers - majority(t.servers);
    if (t.ours > 0 && t.not_ours <= tolerated) return release_verdict::released;
    if (t.not_ours > tolerated) return release_verdict::lost;
    return release_verdict::failed;
}

record_step decide_record(std::span<const record_read> reads, std::string_view mine) {
    record_step step;
    const auto servers = reads.size();
    std::size_t answered = 0;
    bool any_value = false;
    for (const auto& r : reads) {
        answered += r.answered ? 1 : 0;
        any_value = any_value || (r.answered && r.stored);
    }
    if (answered < majority(servers)) return step;  // unreachable
    for (const auto& candidate : reads) {
        if (!candidate.answered || !candidate.stored) continue;
        std::size_t holding = 0;
        for (const auto& r : reads) holding += r.answered && r.stored == candidate.stored ? 1 : 0;
        if (holding < majority(servers)) continue;
        step.what = record_step::kind::agreed;
        step.value = *candidate.stored;
        for (std::size_t i = 0; i < servers; ++i) {
            if (reads[i].answered && reads[i].stored != candidate.stored) step.to.push_back(i);
        }
        return step;
    }
    if (any_value) {
        step.what = record_step::kind::undecided;
        return step;
    }
    step.what = record_step::kind::first_write;
    step.value = std::string(mine);
    for (std::size_t i = 0; i < servers; ++i) {
        if (reads[i].answered) step.to.push_back(i);
    }
    return step;
}

}  // namespace dlock::detail::quorum
