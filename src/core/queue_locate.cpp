#include "core/queue_locate.hpp"

#include <algorithm>
#include <iterator>

namespace dlock::detail {

namespace {

/// The entries of one family (read and write, or permits), in queue order.
std::vector<queue_entry> family(std::vector<queue_entry> entries, bool permits) {
    std::erase_if(entries,
                  [&](const queue_entry& e) { return (e.role == queue_role::permits) != permits; });
    std::sort(entries.begin(), entries.end(),
              [](const queue_entry& a, const queue_entry& b) { return a.order < b.order; });
    return entries;
}

}  // namespace

queue_position locate_in_queue(std::vector<queue_entry> entries, std::string_view ours,
                               std::uint64_t limit) {
    queue_position out;
    const auto me_at = std::find_if(entries.begin(), entries.end(),
                                    [&](const queue_entry& e) { return e.id == ours; });
    if (me_at == entries.end()) return out;
    const bool permits = me_at->role == queue_role::permits;
    const auto line = family(std::move(entries), permits);
    if (permits) {
        std::uint64_t sum = 0;
        bool previous_holds = true;
        for (std::size_t i = 0; i < line.size(); ++i) {
            sum += line[i].count;
            const bool holds = previous_holds && sum <= limit;
            if (line[i].id == ours) {
                out.found = true;
                out.holds = holds;
                out.has_successor = i + 1 < line.size();
                if (!holds) {
                    out.first_waiter = previous_holds;
                    if (!previous_holds) out.watch = line[i - 1].id;
                }
                return out;
            }
            previous_holds = holds;
        }
        return out;
    }
    const auto me =
        std::find_if(line.begin(), line.end(), [&](const queue_entry& e) { return e.id == ours; });
    out.found = true;
    if (me->role != queue_role::read) {
        if (me == line.begin()) {
            out.holds = true;
        } else {
            out.watch = std::prev(me)->id;
            out.watch_is_last = std::prev(me) == line.begin();
            if (!out.watch_is_last) out.refresh = std::prev(me, 2)->id;
        }
        return out;
    }
    for (auto it = me; it != line.begin();) {
        --it;
        if (it->role != queue_role::read) {
            out.watch = it->id;
            const auto write_before =
                std::find_if(std::make_reverse_iterator(it), line.rend(),
                             [](const queue_entry& e) { return e.role != queue_role::read; });
            out.watch_is_last = write_before == line.rend();
            if (!out.watch_is_last) out.refresh = write_before->id;
            return out;
        }
    }
    out.holds = true;
    return out;
}

queue_view view_queue(std::vector<queue_entry> entries, std::uint64_t limit) {
    queue_view out;
    const auto locks = family(entries, false);
    bool write_before = false;
    for (std::size_t i = 0; i < locks.size(); ++i) {
        const auto& n = locks[i];
        const bool read = n.role == queue_role::read;
        out.any_read = out.any_read || read;
        const bool holds = read ? !write_before : i == 0;
        if (!read) write_before = true;
        if (!holds) {
            ++out.lock_waiters;
            continue;
        }
        out.holding.push_back(n.id);
        if (read) {
            ++out.readers;
        } else {
            out.writer = true;
        }
    }
    std::uint64_t sum = 0;
    bool previous_holds = true;
    for (const auto& p : family(std::move(entries), true)) {
        sum += p.count;
        previous_holds = previous_holds && sum <= limit;
        if (!previous_holds) {
            ++out.permit_waiters;
            continue;
        }
        ++out.permit_holders;
        out.permits_in_use += p.count;
        out.holding.push_back(p.id);
    }
    return out;
}

}  // namespace dlock::detail
