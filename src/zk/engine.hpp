// The ZooKeeper lock service behind dlock::zk::client (docs/zookeeper.md): the acquire loop of the
// recipe, the registry of held nodes, and the one background thread per client (heartbeats, loss,
// max_hold, orphan clean-up, dead sessions).
#pragma once

#include <dlock/zk/client.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/lease_core.hpp"
#include "zk/recipe.hpp"
#include "zk/session.hpp"

namespace dlock::zk::detail {

using dlock::detail::lease_core;

class engine final : public dlock::detail::lease_owner,
                     public std::enable_shared_from_this<engine> {
public:
    explicit engine(client_options options);  // validates; throws dlock::error
    ~engine() override;

    void start();
    /// Stops the background thread, loses every live lease and closes the sessions.
    void stop() noexcept;

    dlock::lease acquire_until(std::string_view name, const lock_request& request,
                               const lock_options& options, steady::time_point deadline,
                               std::error_code& ec) noexcept;

    /// Sets semaphore `name`'s number of permits (the data of its persistent parent node).
    void set_permits(std::string_view name, std::uint32_t permits, std::error_code& ec) noexcept;

    void release(lease_core& lease, std::error_code& ec) noexcept override;
    void report_error(std::error_code ec, std::string_view what) noexcept override;
    void notify(const lock_event& event) noexcept override;

    const client_options& options() const noexcept { return options_; }
    std::string lock_path(std::string_view name) const;

private:
    /// One node we hold; shared by every re-entry level's lease.
    struct held_node {
        std::shared_ptr<session> owner;
        std::string path;
        std::uint64_t czxid = 0;
        steady::time_point cap_valid = steady::time_point::max();  // granted + cap - drift
        int depth = 1;                                             // guarded by mutex_
        bool deleted = false;  // guarded by mutex_: removal already decided (loss, max_hold)
    };
    struct entry {
        std::weak_ptr<lease_core> lease;
        std::shared_ptr<held_node> node;
    };

    std::shared_ptr<session> session_for(std::error_code& ec);
    /// Gives up an acquire: deletes our node `parent`/`node` (or queues its deletion), queues the
    /// removal of any node named with `doubtful_guid` (a create whose outcome is unknown; empty:
    /// none), sets `ec`, and reports failures other than contention and cancellation.
    dlock::lease abandon(const std::shared_ptr<session>& s, const std::string& parent,
                         const std::string& node, const std::string& doubtful_guid,
                         std::string_view name, errc code, std::string message,
                         std::error_code& ec);
    int ensure_path(session& s, const std::string& path, int mode);
    dlock::lease acquire_permits(std::string_view name, const lock_request& request,
                                 const lock_options& options, steady::time_point deadline,
                                 std::error_code& ec);
    /// The semaphore's permits from its parent's data; creates the parent (with `limit`) or sets
    /// empty data. ZooKeeper's rc.
    int read_limit(session& s, const std::string& parent, std::uint32_t limit, std::uint64_t& out);
    dlock::lease reenter(std::string_view name, const lock_request& request,
                         const lock_options& options, std::error_code& ec);
    dlock::lease grant(std::string_view name, const lock_options& options,
                       const std::shared_ptr<session>& s, std::string path, std::uint64_t czxid,
                       steady::time_point sent);
    void wake() noexcept;
    void run(std::stop_token stop);
    steady::time_point check_leases(steady::time_point now);
    const ACL_vector* acl() const noexcept;

    client_options options_;
    zk_endpoint endpoint_;

    std::mutex connect_mutex_;  // serialises opening a session
    std::mutex mutex_;          // guards session_, registry_, wake_
    std::shared_ptr<session> session_;
    std::unordered_map<lease_core*, entry> registry_;
    std::condition_variable_any worker_cv_;
    bool wake_ = false;
    std::jthread worker_;
};

}  // namespace dlock::zk::detail
