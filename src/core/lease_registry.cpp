#include "core/lease_registry.hpp"

#include <algorithm>

namespace dlock::detail {

void lease_registry::push(std::vector<slot>& heap, slot s) {
    heap.push_back(s);
    std::push_heap(heap.begin(), heap.end(), later{});
}

void lease_registry::pop(std::vector<slot>& heap) {
    std::pop_heap(heap.begin(), heap.end(), later{});
    heap.pop_back();
}

void lease_registry::clean_top(std::vector<slot>& heap, bool due_heap) {
    while (!heap.empty()) {
        const auto& top = heap.front();
        const auto it = entries_.find(top.key);
        const bool live = it != entries_.end() && it->second.generation == top.generation &&
                          (!due_heap || it->second.scheduled);
        if (live) return;
        pop(heap);
    }
}

void lease_registry::compact_if_needed() {
    // Every track/schedule leaves the previous slots behind; rebuild once they dominate, so the
    // heaps stay O(live leases) whatever the churn, at O(1) amortized per operation.
    if (heap_slots() <= 4 * entries_.size() + 64) return;
    due_heap_.clear();
    deadline_heap_.clear();
    for (const auto& [key, e] : entries_) {
        if (e.scheduled) due_heap_.push_back({e.due, key, e.generation});
        deadline_heap_.push_back({e.deadline, key, e.generation});
    }
    std::make_heap(due_heap_.begin(), due_heap_.end(), later{});
    std::make_heap(deadline_heap_.begin(), deadline_heap_.end(), later{});
}

bool lease_registry::track(const std::shared_ptr<lease_core>& lease, steady::time_point due,
                           bool extend_once) {
    const auto earliest = next_due();
    auto& e = entries_[lease.get()];
    e.lease = lease;
    e.extend_once = extend_once;
    e.scheduled = false;  // until schedule() below pushes its slots
    schedule(lease.get(), due);
    return e.due < earliest;
}

bool lease_registry::untrack(const lease_core* lease) noexcept {
    // Its heap slots go stale (no entry) and are dropped when they reach the top or on compaction.
    return entries_.erase(lease) != 0;
}

bool lease_registry::schedule(const lease_core* lease, steady::time_point due, bool renewed) {
    const auto it = entries_.find(lease);
    if (it == entries_.end()) return false;
    auto& e = it->second;
    e.generation = ++generation_;
    e.deadline = lease->valid_until();
    e.due = std::min(due, e.deadline);  // never past its deadline: that is when it is lost
    e.scheduled = true;
    if (renewed) e.extend_once = false;
    push(due_heap_, {e.due, lease, e.generation});
    push(deadline_heap_, {e.deadline, lease, e.generation});
    compact_if_needed();
    return true;
}

lease_registry::due_batch lease_registry::due(steady::time_point now) {
    due_batch out;
    for (;;) {
        clean_top(due_heap_, true);
        if (due_heap_.empty()) break;
        const auto top = due_heap_.front();
        auto& e = entries_.find(top.key)->second;
        auto lease = e.lease.lock();
        if (!lease || lease->released()) {  // destroyed or released without untrack
            pop(due_heap_);
            entries_.erase(top.key);
            continue;
        }
        // Renew a little early so leases that fall due close together share one round.
        if (top.at > now + lease->plan().every / 8) break;
        pop(due_heap_);
        if (now >= lease->valid_until()) {
            entries_.erase(top.key);
            out.lost.push_back(std::move(lease));
            continue;
        }
        e.scheduled = false;  // out for renewal; its deadline slot still counts
        out.renew.push_back({std::move(lease), e.extend_once});
    }
    return out;
}

steady::time_point lease_registry::next_due() {
    clean_top(due_heap_, true);
    return due_heap_.empty() ? steady::time_point::max() : due_heap_.front().at;
}

steady::time_point lease_registry::earliest_deadline() {
    clean_top(deadline_heap_, false);
    return deadline_heap_.empty() ? steady::time_point::max() : deadline_heap_.front().at;
}

std::vector<std::shared_ptr<lease_core>> lease_registry::lose_all() {
    std::vector<std::shared_ptr<lease_core>> out;
    out.reserve(entries_.size());
    for (auto& [key, e] : entries_) {
        if (auto lease = e.lease.lock(); lease && !lease->released()) out.push_back(lease);
    }
    entries_.clear();
    due_heap_.clear();
    deadline_heap_.clear();
    return out;
}

}  // namespace dlock::detail
