#include "redis/subscriber.hpp"

#include <algorithm>
#include <cerrno>
#include <system_error>

#include <poll.h>
#include <unistd.h>

#include "core/time.hpp"

namespace dlock::redis::detail {
namespace {

constexpr std::chrono::milliseconds min_backoff{50};
/// How long a channel stays subscribed after its last waiter left, and how many may linger.
constexpr std::chrono::milliseconds linger{2000};
constexpr std::size_t max_lingering = 1024;
constexpr std::chrono::milliseconds max_backoff{2000};

template <class Pred>
void wait_until(std::condition_variable& cv, dlock::detail::unique_lock& lock,
                steady::time_point deadline, Pred pred) {
    if (deadline == steady::time_point::max()) {
        cv.wait(lock.native(), pred);
    } else {
        cv.wait_until(lock.native(), deadline, pred);
    }
}

}  // namespace

void signal::raise() {
    dlock::detail::lock_guard lock(mutex_);  // orders it after a waiter's check of the version
    ++version_;
    changed_.notify_all();
}

void signal::wait(std::uint64_t seen, steady::time_point deadline, const std::stop_token& cancel) {
    const std::stop_callback wake_on_cancel(cancel, [this] { raise(); });
    dlock::detail::unique_lock lock(mutex_);
    wait_until(changed_, lock, deadline,
               [&] { return version_.load() != seen || cancel.stop_requested(); });
}

subscriber::subscriber(std::vector<std::shared_ptr<node>> servers,
                       std::function<void(steady::time_point)> wake)
    : servers_(std::move(servers)),
      wake_(std::move(wake)),
      conn_(servers_.at(0)->connect(node::role::subscriber)) {}

subscriber::~subscriber() = default;

subscriber::registration::registration(subscriber& owner, std::string channel, wake_mode mode,
                                       std::string key, signal* also)
    : owner_(owner), channel_(std::move(channel)), key_(std::move(key)), mode_(mode), also_(also) {
    bool first = false;
    {
        dlock::detail::lock_guard lock(owner_.mutex_);
        auto& ch = owner_.channels_[channel_];
        if (also_) ch.signals.emplace_back(key_, also_);
        if (mode_ == wake_mode::all) ++ch.waking_all;
        if (!key_.empty()) ++ch.keyed[key_].registrations;
        if (ch.subscribed) epoch_ = ch.epoch;
        // A channel still subscribed from earlier waiters (lingering) needs no SUBSCRIBE.
        first = ++ch.waiters == 1 && !ch.subscribed;
        if (first) owner_.dirty_ = true;
    }
    if (first) owner_.wake_(steady::time_point::min());
}

subscriber::registration::~registration() {
    bool last = false;
    auto service_by = steady::time_point::min();
    {
        dlock::detail::lock_guard lock(owner_.mutex_);
        auto& ch = owner_.channels_[channel_];
        if (also_) {
            const auto it = std::find(ch.signals.begin(), ch.signals.end(),
                                      std::pair<std::string, signal*>(key_, also_));
            if (it != ch.signals.end()) ch.signals.erase(it);
        }
        if (mode_ == wake_mode::all) --ch.waking_all;
        if (!key_.empty()) {
            const auto it = ch.keyed.find(key_);
            if (it != ch.keyed.end() && --it->second.registrations <= 0) ch.keyed.erase(it);
        }
        last = --ch.waiters == 0;
        if (woken_ && !last) {
            // Woken, but gave up without the lock: the release it was woken for is still unused.
            ++ch.wakeups;
            ch.changed.notify_one();
            if (owner_.lent_) owner_.kick_reader();  // it may be the one to take it
        }
        ch.wakeups = std::min<std::uint64_t>(ch.wakeups, static_cast<std::uint64_t>(ch.waiters));
        // Stay subscribed for a while: a hot lock's next waiter then skips SUBSCRIBE's round trip.
        if (last) ch.idle_since = steady::now();
        if (last && !ch.subscribed) owner_.dirty_ = true;
        // The UNSUBSCRIBE is due after the linger; an unconfirmed SUBSCRIBE is dealt with now.
        if (last) service_by = ch.subscribed ? ch.idle_since + linger : steady::time_point::min();
    }
    if (last) owner_.wake_(service_by);
}

std::uint64_t subscriber::registration::generation_locked() const {
    auto& ch = owner_.channels_[channel_];
    if (key_.empty()) return ch.generation;
    // Both parts only grow: a connection reset (channel) or a message for this key changes the sum.
    return ch.generation + ch.keyed[key_].messages;
}

std::uint64_t subscriber::registration::generation() const {
    dlock::detail::lock_guard lock(owner_.mutex_);
    return generation_locked();
}

std::string subscriber::registration::last_message() const {
    dlock::detail::lock_guard lock(owner_.mutex_);
    auto& ch = owner_.channels_[channel_];
    return key_.empty() ? ch.last_message : ch.keyed[key_].last_message;
}

bool subscriber::registration::subscribed_throughout() const {
    dlock::detail::lock_guard lock(owner_.mutex_);
    const auto& ch = owner_.channels_[channel_];
    return epoch_ != 0 && ch.subscribed && ch.epoch == epoch_;
}

bool subscriber::registration::subscribed() const { return owner_.subscribed(channel_); }

subscriber::registration::reading::reading(const registration& r) : owner_(r.owner_) {
    bool wake = false;
    {
        dlock::detail::lock_guard lock(owner_.mutex_);
        ++owner_.sleepers_;  // service() polls for a sleeper; a lent reader gives it back
        // A waiter that has it lent reads (and dispatches) everything until it gives it back.
        wake = !owner_.lent_ && !owner_.background_polls_;
    }
    if (wake) owner_.wake_(steady::time_point::min());
}

subscriber::registration::reading::~reading() {
    dlock::detail::lock_guard lock(owner_.mutex_);
    --owner_.sleepers_;
}

// In both waits the stop_callback is made before the lock and destroyed after it: it may run at
// once on this thread (stop already requested), and its destructor waits for a callback running
// on another thread, which needs mutex_ (see interrupt()).
void subscriber::registration::wait_subscribed(steady::time_point deadline,
                                               const std::stop_token& cancel) const {
    const std::stop_callback wake_on_cancel(cancel, [this] { owner_.interrupt(channel_); });
    dlock::detail::unique_lock lock(owner_.mutex_);
    auto& ch = owner_.channels_[channel_];  // stays: this registration keeps it listed
    owner_.sleep(
        ch.confirmed, lock, deadline,
        // Runs with mutex_ held, inside the wait (the analysis does not see into it).
        [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return ch.subscribed || cancel.stop_requested(); });
}

void subscriber::registration::wait(std::uint64_t seen, steady::time_point deadline,
                                    const std::stop_token& cancel) const {
    const std::stop_callback wake_on_cancel(cancel, [this] { owner_.interrupt(channel_); });
    dlock::detail::unique_lock lock(owner_.mutex_);
    auto& ch = owner_.channels_[channel_];
    // Back here after a wake-up: that attempt found the lock taken, and whoever took it publishes
    // again when it releases. The wake-up is used up.
    woken_ = false;
    // In wait() from here on, in arrival order (the ticket): a wake_mode::one wake-up goes to the
    // channel's longest waiter when that one reads the connection, else to a sleeping waiter.
    const auto ticket = ++owner_.wait_tickets_;
    ch.in_wait.insert(ticket);
    // Runs with mutex_ held (also inside the condition variable's wait, where the analysis does
    // not see it). Called until it returns true, never after: a wake_mode::one wake-up it takes is
    // this waiter's.
    const auto ready = [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS {
        if (generation_locked() != seen || cancel.stop_requested()) return true;
        // The reader takes it when it is the longest waiter, a sleeper when the reader is not.
        if (mode_ == wake_mode::one && ch.wakeups > 0 &&
            (ch.reading == ticket) == ch.reader_is_longest()) {
            --ch.wakeups;
            woken_ = true;
            return true;
        }
        return false;
    };
    struct leave_wait {
        channel_state& ch;
        std::uint64_t ticket;
        ~leave_wait() { ch.in_wait.erase(ticket); }  // with mutex_ held: `lock` outlives it
    } leaving{ch, ticket};
    if (ready()) return;
    if (owner_.lend_locked()) {
        // This thread reads the connection itself (see the file comment) until what it waits for
        // arrives, the deadline, or the background thread wants the connection back.
        ch.reading = ticket;
        bool done = false;
        subscriber* const self[] = {&owner_};
        std::vector<pollfd> fds;
        while (!done && owner_.keeps_lent_locked()) {
            lock.unlock();
            poll_lent(self, deadline, fds);
            lock.lock();
            done = ready() || steady::now() >= deadline;
        }
        ch.reading = 0;
        const bool wake_background = owner_.give_back_locked();
        if (wake_background) {
            lock.unlock();
            owner_.wake_(steady::time_point::min());
            lock.lock();
        }
        if (done) return;
        // Taken back (or the connection failed): the background thread reads from here on.
    }
    owner_.sleep(ch.changed, lock, deadline, ready);
}

// `lock` holds mutex_ on entry and on return; the analysis cannot follow a lock passed in.
template <class Pred>
void subscriber::sleep(std::condition_variable& cv, dlock::detail::unique_lock& lock,
                       steady::time_point deadline, Pred ready) DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    if (ready()) return;
    // Someone must read for a sleeping waiter: a waiter that has the connection lent, or the
    // background thread, which may have stopped polling it while it was lent.
    ++sleepers_;
    if (!lent_ && !background_polls_) {
        lock.unlock();
        wake_(steady::time_point::min());
        lock.lock();
    }
    wait_until(cv, lock, deadline, ready);
    --sleepers_;
}

void subscriber::poll_lent(std::span<subscriber* const> subs, steady::time_point deadline,
                           std::vector<pollfd>& fds) {
    fds.clear();
    for (const auto* s : subs) {
        fds.push_back({s->conn_->native_handle(), s->conn_->wanted_events(), 0});
        fds.push_back({s->kick_fd_.fd(), POLLIN, 0});
    }
    const int n =
        ::poll(fds.data(), fds.size(), dlock::detail::poll_timeout_ms(steady::now(), deadline));
    if (n <= 0) return;
    for (std::size_t i = 0; i < subs.size(); ++i) {
        if ((fds[2 * i + 1].revents & POLLIN) != 0) subs[i]->kick_fd_.drain();
        if (fds[2 * i].revents != 0) subs[i]->read_available();
    }
}

bool subscriber::keeps_lent_locked() const { return !preempt_ && conn_->is_open(); }

bool subscriber::read_lent(std::span<subscriber* const> subs, steady::time_point deadline,
                           const std::stop_token& cancel, const std::function<bool()>& done) {
    // Made before any lock, as in registration::wait: a cancel kicks every reader's poll.
    const std::stop_callback kick_on_cancel(cancel, [subs] {
        for (const auto* s : subs) s->kick_reader();
    });
    std::size_t lent = 0;
    for (; lent < subs.size(); ++lent) {
        dlock::detail::lock_guard lock(subs[lent]->mutex_);
        if (!subs[lent]->lend_locked()) break;
    }
    const auto keeps_all = [&] {
        return std::all_of(subs.begin(), subs.end(), [](subscriber* s) {
            dlock::detail::lock_guard lock(s->mutex_);
            return s->keeps_lent_locked();
        });
    };
    bool finished = false;
    if (lent == subs.size()) {
        std::vector<pollfd> fds;
        while (!(finished = done() || steady::now() >= deadline || cancel.stop_requested()) &&
               keeps_all())
            poll_lent(subs, deadline, fds);
    }
    for (std::size_t i = 0; i < lent; ++i) {
        bool wake_background = false;
        {
            dlock::detail::lock_guard lock(subs[i]->mutex_);
            wake_background = subs[i]->give_back_locked();
        }
        if (wake_background) subs[i]->wake_(steady::time_point::min());
    }
    return finished;
}

bool subscriber::lend_locked() {
    // The background thread is not using it (it uses it only inside service() and on_readable(),
    // which mark themselves under mutex_), and has nothing to send on it.
    if (lent_ || background_io_ || dirty_ || !conn_->is_open()) return false;
    if (!servers_[server_]->current(*conn_)) return false;
    lent_ = true;
    preempt_ = false;
    lent_node_ = servers_[server_].get();
    lent_generation_ = lent_node_->generation();
    return true;
}

bool subscriber::give_back_locked() {
    const bool wanted = preempt_ || dirty_ || sleepers_ > 0 || !conn_->is_open();
    lent_ = false;
    preempt_ = false;
    lent_node_ = nullptr;
    return wanted && !background_polls_;
}

void subscriber::kick_reader() const noexcept { kick_fd_.signal(); }

bool subscriber::lent() const {
    dlock::detail::lock_guard lock(mutex_);
    return lent_;
}

int subscriber::sleepers() const {
    dlock::detail::lock_guard lock(mutex_);
    return sleepers_;
}

bool subscriber::subscribed(const std::string& channel) const {
    dlock::detail::lock_guard lock(mutex_);
    const auto it = channels_.find(channel);
    return it != channels_.end() && it->second.subscribed;
}

void subscriber::interrupt(const std::string& channel) {
    dlock::detail::lock_guard lock(mutex_);  // orders the notify after a waiter's predicate check
    if (lent_) kick_reader();
    const auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    it->second.changed.notify_all();
    it->second.confirmed.notify_all();
}

void subscriber::notify_everyone_locked() {
    for (auto& [name, ch] : channels_) {
        ch.wake(nullptr);
        ch.confirmed.notify_all();
    }
}

int subscriber::service(steady::time_point now, steady::time_point latest) {
    {
        dlock::detail::lock_guard lock(mutex_);
        if (lent_) {
            // A waiter reads it: ask for it back only when there is work on it.
            const bool moved = lent_node_ && lent_node_->generation() != lent_generation_;
            if (dirty_ || moved || now >= next_linger_expiry_locked()) {
                preempt_ = true;
                kick_reader();
            }
            background_polls_ = false;
            return -1;
        }
        background_io_ = true;
    }
    const int fd = service_connection(now, latest);
    dlock::detail::lock_guard lock(mutex_);
    if (fd >= 0) events_ = conn_->wanted_events();
    background_io_ = false;
    // Read only for someone: a waiter asleep on a condition variable, or a SUBSCRIBE to confirm.
    // What else arrives (a message for a waiter between its attempts, for a lingering channel)
    // waits in the socket for the next reader: that waiter's own wait() reads it.
    background_polls_ =
        fd >= 0 &&
        (sleepers_ > 0 || std::any_of(channels_.begin(), channels_.end(),
                                      [](const auto& kv) { return kv.second.requested; }));
    return background_polls_ ? fd : -1;
}

int subscriber::service_connection(steady::time_point now, steady::time_point latest) {
    std::vector<std::string> subscribe, unsubscribe;
    bool reconnected = false;
    // The node moved (node.hpp): what is subscribed on the old address is reconnected below
    // like a failed connection, so every waiter re-checks.
    if (conn_->is_open() && !servers_[server_]->current(*conn_)) conn_->close();
    {
        dlock::detail::lock_guard lock(mutex_);
        if (!conn_->is_open()) {
            // Nothing is subscribed on a closed connection: a channel nobody waits on has nothing
            // left to undo, so it goes now (its linger deadline would otherwise keep asking for
            // a service() that cannot act, and the thread would spin).
            std::erase_if(channels_, [](const auto& kv) { return kv.second.waiters == 0; });
            if (channels_.empty() || now < reconnect_at_) return -1;
            dirty_ = true;
        }
        if (!dirty_ && now < next_linger_expiry_locked()) return conn_->native_handle();
    }
    if (!conn_->is_open()) {
        if (!servers_[server_]->current(*conn_))
            conn_ = servers_[server_]->connect(node::role::subscriber);
        std::error_code ec;
        conn_->open(ec, latest);  // bounded by connect_timeout and by the caller
        if (ec) move_to_next_server();
        dlock::detail::lock_guard lock(mutex_);
        if (ec) {
            back_off_locked();
            return -1;
        }
        backoff_ = std::chrono::milliseconds{0};
        reconnected = true;
    }
    {
        dlock::detail::lock_guard lock(mutex_);
        dirty_ = false;
        for (auto it = channels_.begin(); it != channels_.end();) {
            auto& [name, ch] = *it;
            if (reconnected) {
                ch.subscribed = false;
                ++ch.epoch;
                ch.requested = false;
                ++ch.generation;  // messages may have been lost while disconnected: retry now
            }
            const bool lingered = ch.waiters == 0 && (now - ch.idle_since >= linger ||
                                                      channels_.size() > max_lingering);
            if (ch.waiters > 0 && !ch.subscribed && !ch.requested) {
                subscribe.push_back(name);
                ch.requested = true;
            } else if (lingered && ch.subscribed) {
                unsubscribe.push_back(name);
                ch.subscribed = false;
                ++ch.epoch;
            } else if (lingered && !ch.requested && !ch.subscribed) {
                it = channels_.erase(it);
                continue;
            }
            ++it;
        }
        if (reconnected) notify_everyone_locked();
    }
    std::error_code ec;
    for (const auto* list : {&subscribe, &unsubscribe}) {
        if (list->empty() || ec) continue;
        command_args cmd{list == &subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE"};
        for (const auto& c : *list) cmd.push_back(c);
        conn_->send(cmd, ec, latest);
    }
    if (ec) {
        reset_connection();
        return -1;
    }
    return conn_->native_handle();
}

short subscriber::wanted_events() const noexcept { return events_; }

void subscriber::on_readable() {
    {
        dlock::detail::lock_guard lock(mutex_);
        if (lent_) return;  // its reader reads it
        background_io_ = true;
    }
    read_available();
    dlock::detail::lock_guard lock(mutex_);
    background_io_ = false;
}

void subscriber::read_available() {
    // One read of what arrived, then its messages: reading again only to hear EAGAIN would cost a
    // system call per message.
    std::error_code ec;
    if (!conn_->read_ready(ec)) {
        reset_connection();
        return;
    }
    reply r;
    while (conn_->next_read(r)) dispatch(r);
}

void subscriber::dispatch(const reply& r) {
    if (r.type != reply::kind::array || r.elements.size() < 3) return;
    const auto& kind = r.elements[0].text;
    const auto& name = r.elements[1].text;
    dlock::detail::lock_guard lock(mutex_);
    const auto it = channels_.find(name);
    if (it == channels_.end()) return;
    auto& ch = it->second;
    if (kind == "message") {
        const auto& text = r.elements[2].text;
        if (!ch.keyed.empty() || text.starts_with("granted ")) {
            // A hand-off channel: "granted <fence> <ticket> <token>" is for that token's waiter
            // only (any message's last word names it); one for a token nobody here waits with
            // (any more) is dropped.
            const auto space = text.rfind(' ');
            const auto it = ch.keyed.find(text.substr(space + 1));
            if (it != ch.keyed.end()) {
                it->second.last_message = text;
                ++it->second.messages;
                ch.wake(&it->first);
            }
            return;
        }
        ch.last_message = text;
        if (ch.waking_all > 0 || ch.waiters == 0) {
            ++ch.generation;
            ch.wake(nullptr);
        } else if (ch.wakeups < static_cast<std::uint64_t>(ch.waiters)) {
            // One release lets one waiter in: wake one, not the herd. A reader that is the
            // channel's longest waiter takes it itself, right after this read.
            ++ch.wakeups;
            if (!ch.reader_is_longest()) ch.changed.notify_one();
        }
    } else if (kind == "subscribe") {
        ch.requested = false;
        ch.subscribed = true;
        ++ch.epoch;
        if (ch.waiters == 0) dirty_ = true;  // the waiter left meanwhile: unsubscribe
        // Only from now on does a PUBLISH on the channel reach us. A waiter that read its
        // generation before this (its wait_subscribed() gave up at command_timeout, or the
        // connection came back and the reconnect woke it first) may have attempted before the
        // server subscribed, so a release in between published its wake-up to nobody: move the
        // generation, and it attempts once more (docs/handoff-model.md, "What spin found"). On
        // every confirmation, not just late ones: a waiter whose wait_subscribed() saw it reads
        // its generation after it and is not woken, so the usual path costs nothing; one woken
        // that finds the lock taken has read the new generation and waits again as usual; and a
        // keyed waiter woken without a message has no new grant to accept (it refreshes).
        ++ch.generation;
        ch.wake(nullptr);
        ch.confirmed.notify_all();
    } else if (kind == "unsubscribe") {
        if (ch.waiters > 0) dirty_ = true;  // a waiter came back meanwhile: subscribe again
    }
}

void subscriber::move_to_next_server() {
    conn_->close();
    if (servers_.size() > 1) {  // any of them carries every release
        server_ = (server_ + 1) % servers_.size();
        conn_ = servers_[server_]->connect(node::role::subscriber);
    }
}

void subscriber::back_off_locked() {
    backoff_ = std::clamp(backoff_ * 2, min_backoff, max_backoff);
    reconnect_at_ = steady::now() + backoff_;
}

void subscriber::reset_connection() {
    move_to_next_server();
    dlock::detail::lock_guard lock(mutex_);
    for (auto& [name, ch] : channels_) {
        ch.subscribed = false;
        ++ch.epoch;
        ch.requested = false;
        ++ch.generation;  // wake waiters: they retry now and fall back on the lease bound
    }
    notify_everyone_locked();
    dirty_ = true;
    back_off_locked();
}

steady::time_point subscriber::next_linger_expiry_locked() const {
    auto at = steady::time_point::max();
    for (const auto& [name, ch] : channels_) {
        // A SUBSCRIBE still in flight is dealt with when its confirmation arrives.
        if (ch.waiters == 0 && !ch.requested) at = std::min(at, ch.idle_since + linger);
    }
    return at;
}

steady::time_point subscriber::next_retry() const {
    dlock::detail::lock_guard lock(mutex_);
    // Lent: its reader has the connection (service() takes it back for a due linger).
    if (lent_ || conn_->is_open()) return next_linger_expiry_locked();
    // Disconnected: lingering has no meaning (nothing is subscribed); reconnect only for waiters.
    const bool wanted = std::any_of(channels_.begin(), channels_.end(),
                                    [](const auto& kv) { return kv.second.waiters > 0; });
    return wanted ? reconnect_at_ : steady::time_point::max();
}

void subscriber::wake_all() {
    dlock::detail::lock_guard lock(mutex_);
    if (lent_) kick_reader();
    for (auto& [name, ch] : channels_) ++ch.generation;
    notify_everyone_locked();
}

}  // namespace dlock::redis::detail
