#include "core/lease_registry.hpp"

#include <algorithm>

namespace dlock::detail {

bool lease_registry::find(const lease_core* lease, std::uint32_t& index) const noexcept {
    if (lease == nullptr) return false;
    if (lease != last_key_) {
        const auto it = index_.find(lease);
        if (it == index_.end()) return false;
        last_key_ = lease;
        last_index_ = it->second;
    }
    index = last_index_;
    return true;
}

void lease_registry::erase(std::uint32_t index) noexcept {
    auto& e = entries_[index];
    index_.erase(e.key);
    if (last_key_ == e.key) last_key_ = nullptr;
    e = entry{};             // generation 0 matches no slot: they all go stale
    free_.push_back(index);  // within the capacity track() reserved
}

void lease_registry::push(std::vector<slot>& heap, slot s) {
    heap.push_back(s);
    std::push_heap(heap.begin(), heap.end(), later{});
}

void lease_registry::pop(std::vector<slot>& heap) {
    std::pop_heap(heap.begin(), heap.end(), later{});
    heap.pop_back();
}

lease_registry::entry* lease_registry::clean_top(std::vector<slot>& heap, bool due_heap) {
    while (!heap.empty()) {
        const auto& top = heap.front();
        auto& e = entries_[top.index];
        if (e.generation == top.generation && (!due_heap || e.scheduled)) return &e;
        pop(heap);
    }
    return nullptr;
}

void lease_registry::compact_if_needed() {
    // Every track/schedule leaves the previous slots behind; rebuild once they dominate, so the
    // heaps stay O(live leases) whatever the churn, at O(1) amortized per operation.
    if (heap_slots() <= 4 * size() + 64) return;
    due_heap_.clear();
    deadline_heap_.clear();
    for (std::uint32_t i = 0; i < entries_.size(); ++i) {
        const auto& e = entries_[i];
        if (e.key == nullptr) continue;
        if (e.scheduled) due_heap_.push_back({e.due, i, e.generation});
        deadline_heap_.push_back({e.deadline, i, e.generation});
    }
    std::make_heap(due_heap_.begin(), due_heap_.end(), later{});
    std::make_heap(deadline_heap_.begin(), deadline_heap_.end(), later{});
}

bool lease_registry::track(const std::shared_ptr<lease_core>& lease, steady::time_point due,
                           bool extend_once) {
    const auto earliest = next_due();
    std::uint32_t index = 0;
    if (!find(lease.get(), index)) {
        const bool reuse = !free_.empty();
        index = reuse ? free_.back() : static_cast<std::uint32_t>(entries_.size());
        if (!reuse) {
            entries_.emplace_back();
            try {
                if (free_.capacity() < entries_.capacity()) free_.reserve(entries_.capacity());
            } catch (...) {
                entries_.pop_back();
                throw;
            }
        }
        try {
            index_.emplace(lease.get(), index);
        } catch (...) {
            if (!reuse) entries_.pop_back();
            throw;
        }
        if (reuse) free_.pop_back();
        entries_[index].key = lease.get();
    }
    auto* e = &entries_[index];
    e->lease = lease;
    e->extend_once = extend_once;
    e->scheduled = false;  // until schedule() below pushes its slots
    schedule(lease.get(), due);
    return e->due < earliest;
}

bool lease_registry::untrack(const lease_core* lease) noexcept {
    // Its heap slots go stale (generation 0) and are dropped when they reach the top or on
    // compaction.
    std::uint32_t index = 0;
    if (!find(lease, index)) return false;
    erase(index);
    return true;
}

bool lease_registry::schedule(const lease_core* lease, steady::time_point due, bool renewed) {
    std::uint32_t index = 0;
    if (!find(lease, index)) return false;
    auto* e = &entries_[index];
    e->generation = ++generation_;
    e->deadline = lease->valid_until();
    e->due = std::min(due, e->deadline);  // never past its deadline: that is when it is lost
    e->scheduled = true;
    if (renewed) e->extend_once = false;
    push(due_heap_, {e->due, index, e->generation});
    push(deadline_heap_, {e->deadline, index, e->generation});
    compact_if_needed();
    return true;
}

lease_registry::due_batch lease_registry::due(steady::time_point now) {
    due_batch out;
    for (;;) {
        auto* e = clean_top(due_heap_, true);
        if (e == nullptr) break;
        const auto top = due_heap_.front();
        auto lease = e->lease.lock();
        if (!lease || lease->released()) {  // destroyed or released without untrack
            pop(due_heap_);
            erase(top.index);
            continue;
        }
        // Renew a little early so leases that fall due close together share one round.
        if (top.at > now + lease->plan().every / 8) break;
        pop(due_heap_);
        if (now >= lease->valid_until()) {
            erase(top.index);
            out.lost.push_back(std::move(lease));
            continue;
        }
        e->scheduled = false;  // out for renewal; its deadline slot still counts
        out.renew.push_back({std::move(lease), e->extend_once});
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
    out.reserve(size());
    for (auto& e : entries_) {
        if (e.key == nullptr) continue;
        if (auto lease = e.lease.lock(); lease && !lease->released()) out.push_back(lease);
    }
    index_.clear();
    entries_.clear();
    free_.clear();
    last_key_ = nullptr;
    due_heap_.clear();
    deadline_heap_.clear();
    return out;
}

}  // namespace dlock::detail
