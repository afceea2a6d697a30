#include "redis/node.hpp"

#include <algorithm>

namespace dlock::redis::detail {

namespace {

bool same_address(const dlock::detail::redis_endpoint& a, const dlock::detail::redis_endpoint& b) {
    return a.kind == b.kind && a.host == b.host && a.port == b.port && a.path == b.path &&
           a.user == b.user && a.password == b.password && a.has_password == b.has_password &&
           a.db == b.db;
}

constexpr const char* client_names[node::roles] = {"dlock:cmd", "dlock:renew", "dlock:sub",
                                                   "dlock:watch"};

}  // namespace

bool address_source::suspect(const dlock::detail::redis_endpoint& /*seen*/,
                             std::string_view /*why*/) noexcept {
    return false;
}

void address_source::on_change(const std::function<void()>& /*changed*/) {}

node::node(std::unique_ptr<address_source> source, std::chrono::milliseconds connect_timeout,
           std::chrono::milliseconds command_timeout)
    : source_(std::move(source)),
      connect_timeout_(connect_timeout),
      command_timeout_(command_timeout) {
    // The address is asked for outside settings_mutex_: a Sentinel address may discover the
    // master, which holds the resolver's discovery lock, and a discovery on the background
    // thread calls refresh() (settings_mutex_) under that lock: one order only.
    auto first = source_->current();
    {
        dlock::detail::lock_guard lock(settings_mutex_);
        now_ = make_generation(0, std::move(first));
    }
    renew_conn_ = connect(role::renewals);
    source_->on_change([this] { refresh(); });
}

std::shared_ptr<const node::generation_settings> node::make_generation(
    std::uint64_t number, dlock::detail::redis_endpoint endpoint) const {
    auto g = std::make_shared<generation_settings>();
    g->number = number;
    for (std::size_t r = 0; r < roles; ++r) {
        g->by_role[r] = std::make_shared<const connection_settings>(
            connection_settings{endpoint, connect_timeout_, command_timeout_, client_names[r]});
    }
    g->endpoint = std::move(endpoint);
    return g;
}

std::shared_ptr<const node::generation_settings> node::snapshot() const {
    dlock::detail::lock_guard lock(settings_mutex_);
    return now_;
}

std::shared_ptr<const connection_settings> node::settings(role r) const {
    return snapshot()->by_role[static_cast<std::size_t>(r)];
}

std::unique_ptr<connection> node::connect(role r) const {
    return std::make_unique<connection>(settings(r));
}

bool node::current(const connection& c) const {
    const auto g = snapshot();
    return std::any_of(std::begin(g->by_role), std::end(g->by_role),
                       [&](const auto& s) { return s.get() == &c.settings(); });
}

std::uint64_t node::generation() const { return snapshot()->number; }

std::string node::describe() const { return snapshot()->endpoint.describe(); }

void node::refresh() {
    auto address = source_->current();
    std::function<void()> moved;
    {
        dlock::detail::lock_guard lock(settings_mutex_);
        if (same_address(now_->endpoint, address)) return;
        now_ = make_generation(now_->number + 1, std::move(address));
        moved = moved_;
    }
    if (moved) moved();
}

void node::suspect(const connection& seen, std::string_view why) noexcept {
    try {
        if (source_->suspect(seen.settings().endpoint, why)) refresh();
    } catch (...) {
        // Out of memory: the address is re-read at the next suspicion.
    }
}

void node::on_moved(std::function<void()> moved) {
    dlock::detail::lock_guard lock(settings_mutex_);
    moved_ = std::move(moved);
}

connection& node::renewal_connection() {
    if (!current(*renew_conn_)) renew_conn_ = connect(role::renewals);
    return *renew_conn_;
}

node::pooled::pooled(node& n, steady::time_point deadline) : node_(&n) {
    dlock::detail::unique_lock lock(n.pool_mutex_);
    if (n.queue_.empty()) {
        while (!n.idle_.empty()) {
            conn_ = std::move(n.idle_.back());
            n.idle_.pop_back();
            if (n.current(*conn_)) return;
            conn_.reset();  // the node moved: closed, not reused
            --n.created_;
        }
        if (n.created_ < max_pooled) {
            conn_ = n.connect(role::commands);  // connects lazily, on first use
            ++n.created_;
            return;
        }
    }
    slot_waiter me;
    n.queue_.push_back(&me);
    const auto handed = [&] { return me.conn != nullptr; };
    if (deadline == steady::time_point::max()) {
        me.ready.wait(lock.native(), handed);
    } else if (!me.ready.wait_until(lock.native(), deadline, handed)) {
        n.queue_.erase(std::find(n.queue_.begin(), n.queue_.end(), &me));
        return;  // get() is null: no connection came back in time
    }
    conn_ = std::move(me.conn);
}

node::pooled::~pooled() {
    if (!conn_) return;
    auto& n = *node_;
    if (!n.current(*conn_)) {
        // The node moved while this was lent: close it; a waiter gets a new one in its place.
        conn_.reset();
        try {
            conn_ = n.connect(role::commands);  // connects lazily, on first use
        } catch (...) {
            // Out of memory: the slot is freed instead, for the next caller to fill.
        }
        dlock::detail::lock_guard lock(n.pool_mutex_);
        if (n.queue_.empty() || !conn_) {
            --n.created_;
            return;  // conn_ (not yet connected) goes with this object
        }
        auto* next = n.queue_.front();
        n.queue_.pop_front();
        next->conn = std::move(conn_);
        next->ready.notify_one();
        return;
    }
    dlock::detail::lock_guard lock(n.pool_mutex_);
    if (n.queue_.empty()) {
        n.idle_.push_back(std::move(conn_));
        return;
    }
    auto* next = n.queue_.front();
    n.queue_.pop_front();
    next->conn = std::move(conn_);
    next->ready.notify_one();
}

}  // namespace dlock::redis::detail
