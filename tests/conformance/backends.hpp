// The backends the conformance suite runs over. Each is a traits struct:
//
//   label                 short name, used in test names and skip reasons
//   lacks(kind)           true for the kinds the backend answers errc::unsupported for; the suite
//                         asserts that answer and skips those tests
//   lock_kinds_share_a_queue  true when the lock kinds (all but permits) of one name wait in one
//                         queue, so that another lock kind waits instead of being refused
//   cross_process         false for a backend no other process can reach (the in-memory one)
//   max_name              the longest lock name accepted, in bytes
//   make()                a client for the tests of this process (servers start once per binary)
//   child_args()          what a child process needs to build its own client: make_child(args)
//   make_child(args, s)   a client in a child process; `s` bounds how long a dead or frozen
//                         holder keeps its grant (ZooKeeper's session timeout)
//   queued(b, name)       how many waiters are queued on `name` (plus its holders on ZooKeeper,
//                         whose queue holds both): grows by one per waiter that queued, and is 0
//                         when nothing is left behind
//   leftovers(b, name)    what a waiter that gave up could leave behind on the server: queue
//                         entries, and on Redis also the waiters' liveness entries; 0 when clean
//
// The suite reaches the binary's backend through service() (a `traits<T>` over one of these),
// so conformance_test.cpp compiles once for all backends. To register a backend: add a traits
// struct here, a one-line conformance_<name>.cpp defining service(), its binary in
// CMakeLists.txt, and its row in CONTRIBUTING.md.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/dlock.hpp>
#include <dlock/redis/client.hpp>
#include <dlock/redlock/client.hpp>
#if DLOCK_HAS_ZOOKEEPER
#include <dlock/zk/client.hpp>
#endif
#if DLOCK_HAS_ETCD
#include <dlock/etcd/client.hpp>
#endif

#include "memory_backend.hpp"
#include "redis_fleet.hpp"
#include "redis_server.hpp"
#include "shared_redis.hpp"
#include "test_env.hpp"
#include "tls_certs.hpp"
#if DLOCK_HAS_ZOOKEEPER
#include "zk_server.hpp"
#endif
#if DLOCK_HAS_ETCD
#include "etcd_server.hpp"
#endif

namespace dlock::test::conformance {

struct memory {
    static constexpr const char* label = "memory";
    static constexpr bool lock_kinds_share_a_queue = false;
    static constexpr bool cross_process = false;
    static bool lacks(lock_kind) { return false; }
    static std::size_t max_name() { return memory_backend::max_name_length; }
    static std::unique_ptr<backend> make() { return std::make_unique<memory_backend>(); }
    static std::vector<std::string> child_args() { return {}; }
    static std::unique_ptr<backend> make_child(const std::vector<std::string>&,
                                               std::chrono::milliseconds) {
        return make();
    }
    static std::size_t queued(backend& b, const std::string& name) {
        return static_cast<memory_backend&>(b).queued(name);
    }
    static std::size_t leftovers(backend& b, const std::string& name) {
        return queued(b, name) + static_cast<memory_backend&>(b).held(name);
    }
};

namespace detail {
inline long long integer_of(const redis::reply& r) {
    if (r.is_nil()) return 0;
    return r.type == redis::reply::kind::integer ? r.integer : std::stoll(r.text);
}
}  // namespace detail

struct redis_single {
    static constexpr const char* label = "redis";
    static constexpr bool lock_kinds_share_a_queue = false;
    static constexpr bool cross_process = true;
    static bool lacks(lock_kind) { return false; }
    static std::size_t max_name() { return redis::max_name_length; }
    static std::unique_ptr<backend> make() {
        return std::make_unique<redis::client>(redis::client_options{.url = shared_redis().url()});
    }
    static std::vector<std::string> child_args() { return {shared_redis().url()}; }
    static std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                               std::chrono::milliseconds) {
        return std::make_unique<redis::client>(redis::client_options{.url = args.at(0)});
    }
    static std::size_t queued(backend& b, const std::string& name) {
        auto& c = static_cast<redis::client&>(b);
        return static_cast<std::size_t>(
            detail::integer_of(c.command({"ZCARD", c.lock_key(name) + ":queue"})));
    }
    static std::size_t leftovers(backend& b, const std::string& name) {
        auto& c = static_cast<redis::client&>(b);
        const auto alive = c.lock_key(name) + ":alive";
        const auto type = c.command({"TYPE", alive}).text;
        const auto entries = type == "hash"   ? c.command({"HLEN", alive})
                             : type == "zset" ? c.command({"ZCARD", alive})
                                              : redis::reply{};
        return queued(b, name) + static_cast<std::size_t>(detail::integer_of(entries));
    }
};

/// One server over TLS (rediss://, verified against a CA the binary makes; shared_tls_redis()),
/// started once per binary: the Redis engine over the TLS transport, every kind (docs/tls.md).
struct redis_tls : redis_single {
    static constexpr const char* label = "redis_tls";
    static std::string url() {
        return shared_tls_redis().tls_url() + "?tls_ca=" + shared_tls_certs().ca();
    }
    static std::unique_ptr<backend> make() { return make_child(child_args(), {}); }
    static std::vector<std::string> child_args() { return {url()}; }
};

/// Three independent servers, started once per binary.
inline redis_fleet& conformance_fleet() {
    static redis_fleet fleet(3);
    return fleet;
}

struct redlock {
    static constexpr const char* label = "redlock";
    static constexpr bool lock_kinds_share_a_queue = false;
    static constexpr bool cross_process = true;
    /// Redlock is the exclusive lock only (docs/redlock.md).
    static bool lacks(lock_kind kind) { return kind != lock_kind::exclusive; }
    static std::size_t max_name() { return redis::max_name_length; }
    static std::unique_ptr<backend> make() { return make_child(child_args(), {}); }
    static std::vector<std::string> child_args() { return conformance_fleet().urls(); }
    static std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                               std::chrono::milliseconds) {
        // A node timeout that a loaded 2-core CI machine meets (the default, at most 50 ms, is
        // for a quiet network): a missed reply is quorum_unreachable, not a retry.
        return std::make_unique<dlock::redlock::client>(dlock::redlock::client_options{
            .urls = args, .node_timeout = scaled(std::chrono::milliseconds(250))});
    }
    static std::size_t queued(backend&, const std::string&) { return 0; }
    static std::size_t leftovers(backend&, const std::string&) { return 0; }
};

#if DLOCK_HAS_ZOOKEEPER
struct zookeeper {
    static constexpr const char* label = "zookeeper";
    static constexpr bool lock_kinds_share_a_queue = true;
    static constexpr bool cross_process = true;
    static bool lacks(lock_kind) { return false; }
    static std::size_t max_name() { return zk::max_name_length; }
    static std::unique_ptr<backend> make() {
        return std::make_unique<zk::client>(
            zk::client_options{.url = shared_zk().url("/conformance")});
    }
    static std::vector<std::string> child_args() { return {shared_zk().url("/conformance")}; }
    static std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                               std::chrono::milliseconds session) {
        zk::client_options options{.url = args.at(0)};
        if (session > std::chrono::milliseconds::zero()) options.session_timeout = session;
        return std::make_unique<zk::client>(std::move(options));
    }
    static std::size_t queued(backend& b, const std::string& name) {
        return shared_zk().children(static_cast<zk::client&>(b).lock_path(name)).size();
    }
    static std::size_t leftovers(backend& b, const std::string& name) { return queued(b, name); }
};
#endif  // DLOCK_HAS_ZOOKEEPER

#if DLOCK_HAS_ETCD
struct etcd {
    static constexpr const char* label = "etcd";
    /// The lock kinds queue their keys under one prefix per name (docs/etcd.md, "Kinds").
    static constexpr bool lock_kinds_share_a_queue = true;
    static constexpr bool cross_process = true;
    static bool lacks(lock_kind) { return false; }
    static std::size_t max_name() { return dlock::etcd::max_name_length; }
    static std::unique_ptr<backend> make() { return make_child(child_args(), {}); }
    static std::vector<std::string> child_args() { return {shared_etcd().url("conformance")}; }
    /// `session` bounds a dead holder's grant: the etcd lease's TTL (whole seconds, at least 2).
    static std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                               std::chrono::milliseconds session) {
        // A bound on granting the session that a loaded 2-core CI machine meets.
        dlock::etcd::client_options options{.url = args.at(0),
                                            .connect_timeout = scaled(std::chrono::seconds(10))};
        if (session > std::chrono::milliseconds::zero())
            options.session_ttl = std::max<std::chrono::milliseconds>(
                std::chrono::ceil<std::chrono::seconds>(session), std::chrono::seconds(2));
        return std::make_unique<dlock::etcd::client>(std::move(options));
    }
    /// Its holder's key and its waiters' keys, plus the calls of this client waiting inside it
    /// for their turn to queue (one key per client and name).
    static std::size_t queued(backend& b, const std::string& name) {
        auto& c = static_cast<dlock::etcd::client&>(b);
        return shared_etcd().count(c.key_prefix(name)) + c.waiting_here(name);
    }
    static std::size_t leftovers(backend& b, const std::string& name) { return queued(b, name); }
};
#endif  // DLOCK_HAS_ETCD

/// The traits of the binary's backend, at run time.
class service_traits {
public:
    virtual ~service_traits() = default;
    const char* label = "";
    bool cross_process = true;
    bool lock_kinds_share_a_queue = false;
    virtual bool lacks(lock_kind kind) const = 0;
    virtual std::size_t max_name() const = 0;
    virtual std::unique_ptr<backend> make() const = 0;
    virtual std::vector<std::string> child_args() const = 0;
    virtual std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                                std::chrono::milliseconds session) const = 0;
    virtual std::size_t queued(backend& b, const std::string& name) const = 0;
    virtual std::size_t leftovers(backend& b, const std::string& name) const = 0;
};

template <class T>
class traits final : public service_traits {
public:
    traits() {
        label = T::label;
        cross_process = T::cross_process;
        lock_kinds_share_a_queue = T::lock_kinds_share_a_queue;
    }
    bool lacks(lock_kind kind) const override { return T::lacks(kind); }
    std::size_t max_name() const override { return T::max_name(); }
    std::unique_ptr<backend> make() const override { return T::make(); }
    std::vector<std::string> child_args() const override { return T::child_args(); }
    std::unique_ptr<backend> make_child(const std::vector<std::string>& args,
                                        std::chrono::milliseconds session) const override {
        return T::make_child(args, session);
    }
    std::size_t queued(backend& b, const std::string& name) const override {
        return T::queued(b, name);
    }
    std::size_t leftovers(backend& b, const std::string& name) const override {
        return T::leftovers(b, name);
    }
};

/// Defined once per binary (conformance_<backend>.cpp).
const service_traits& service();

}  // namespace dlock::test::conformance
