// The ZooKeeper lock recipe's pure logic, free of I/O (docs/zookeeper.md): URL parsing, the
// encoding of lock names into one znode name, lock-node names, the decision "do we hold, and if
// not, which node do we watch" over a getChildren result (the queue rules themselves are
// core/queue_locate.hpp's, shared with etcd: sequence numbers order the nodes), and the per-kind
// driver that the engine's one acquire loop runs on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/backend.hpp>

namespace dlock::zk::detail {

struct zk_endpoint {
    /// "host:port,host:port" as the C client's connect string.
    std::string hosts;
    /// The base path without a trailing slash; "" for the root.
    std::string base;
};

/// Parses `zk://host[:port][,host[:port]...][/base/path]`; on failure sets ec to
/// errc::invalid_argument with a message naming the problem.
zk_endpoint parse_zk_url(std::string_view url, std::error_code& ec);

/// `name` as one znode name: bytes outside [A-Za-z0-9._~:@=+,-] become %XX; "." and ".." are
/// escaped too. Injective, so distinct names never share a node.
std::string encode_name(std::string_view name);

/// The prefix of a lock node: "<guid>-rd-" or "<guid>-wr-"; the server appends the sequence.
std::string node_prefix(std::string_view guid, bool read);

struct lock_node {
    std::string name;  ///< the child's name, as listed
    std::string guid;
    bool read = false;
    std::int64_t sequence = 0;
};

/// Parses a child name made by node_prefix + a 10-digit sequence; nullopt for anything else
/// (foreign nodes are ignored by the recipe).
std::optional<lock_node> parse_node(const std::string& name);

struct position {
    bool found = false;          ///< our node is among the children
    bool holds = false;          ///< it holds the lock
    std::string watch{};         ///< when found && !holds: the child to watch
    bool watch_is_last = false;  ///< only `watch` keeps ours from holding (queue_position)
    std::string refresh{};       ///< !watch_is_last: look again once it goes (queue_position)
};

/// Where the node named `ours` stands among `children` (docs/zookeeper.md, step 2): a write node
/// holds when it is first and watches its immediate predecessor; a read node holds when no write
/// node is before it and watches the nearest earlier write node.
position locate(const std::vector<std::string>& children, std::string_view ours);

/// The prefix of a semaphore node holding `count` permits: "<guid>-pm<10 digits>-".
std::string permit_prefix(std::string_view guid, std::uint32_t count);

/// True for a name made by permit_prefix + a sequence (a semaphore's node).
bool is_permit_node(const std::string& name);

struct permit_position {
    bool found = false;          ///< our node is among the children
    bool holds = false;          ///< our permits are granted
    bool has_successor = false;  ///< a node follows ours (it may watch us)
    bool first_waiter = false;   ///< !holds and every earlier node holds: watch the children
    std::string watch{};         ///< !holds && !first_waiter: the predecessor to watch
};

/// Where the semaphore node `ours` stands among `children` (docs/zookeeper.md, "Semaphore"):
/// nodes in sequence order hold while the running sum of their counts stays <= limit; that is
/// strictly first come first served.
permit_position locate_permits(const std::vector<std::string>& children, std::string_view ours,
                               std::uint64_t limit);

/// Where our node stands after one getChildren, in the same shape for every kind: the engine's one
/// acquire loop acts on it without knowing the kind.
struct standing {
    bool found = false;           ///< our node is among the children
    bool holds = false;           ///< it holds the lock (or its permits)
    bool wake_successor = false;  ///< holds, and a semaphore node follows ours (it may watch us)
    /// !holds: watch the parent's children and its data (the semaphore's first waiter, who waits
    /// for a release or for set_permits).
    bool watch_parent = false;
    std::string watch{};  ///< !holds && !watch_parent: the child to watch
    /// A lock's node: `watch` is the only node that keeps ours from holding, so its deletion
    /// grants ours (sequence numbers only grow: no node is ever placed before ours).
    bool watch_is_last = false;
    /// A lock's node, !watch_is_last: the child whose going can leave `watch` the last one ahead
    /// of ours; watched too, it has us look again before `watch` goes (docs/zookeeper.md, step 5).
    std::string refresh{};
};

/// The pure part of one recipe: how its nodes are named, which children belong to another kind
/// (one name serves one kind, dlock/backend.hpp) and where our node stands (locate or
/// locate_permits). exclusive, reentrant, fair and write share one queue of write nodes; read
/// takes read nodes in that queue; permits takes semaphore nodes of `count` permits.
class driver {
public:
    explicit driver(lock_kind kind, std::uint32_t count = 1) noexcept
        : kind_(kind), count_(count) {}

    lock_kind kind() const noexcept { return kind_; }
    /// A semaphore: the parent is persistent and holds the number of permits.
    bool permits() const noexcept { return kind_ == lock_kind::permits; }
    /// Our node's prefix for the acquire whose guid is `guid`.
    std::string prefix(std::string_view guid) const;
    /// True for a child of another kind's recipe: the acquire fails with unexpected_reply.
    bool foreign(const std::string& child) const;
    /// Where `ours` stands among `children`; `limit` is the semaphore's number of permits
    /// (ignored by the lock kinds).
    standing locate(const std::vector<std::string>& children, std::string_view ours,
                    std::uint64_t limit = 0) const;

    /// For messages: `lock "name"` or `semaphore "name"`.
    std::string quoted(std::string_view name) const;
    /// For messages: the kind a foreign child belongs to.
    const char* other_kind() const noexcept;
    /// For messages: why a wait is needed ("is held by someone else", "has no permits free").
    const char* busy() const noexcept;
    /// For messages: "still held" or "still full".
    const char* still() const noexcept;

private:
    lock_kind kind_;
    std::uint32_t count_;
};

/// Who holds and who waits among the children of a lock node (backend::inspect), by the same
/// rules as locate() and locate_permits(). Children of neither shape are counted in `foreign`.
struct children_view {
    std::uint32_t readers = 0;         ///< read nodes that hold
    bool writer = false;               ///< a write node holds
    std::uint32_t lock_waiters = 0;    ///< read and write nodes that wait
    bool any_read = false;             ///< a read node is among the children
    std::uint32_t permit_holders = 0;  ///< semaphore nodes that hold
    std::uint64_t permits_in_use = 0;  ///< the permits they hold
    std::uint32_t permit_waiters = 0;  ///< semaphore nodes that wait
    std::uint32_t foreign = 0;
    std::vector<std::string> holding{};  ///< the names of the holding children
};

/// `limit`: the semaphore's number of permits (ignored without semaphore nodes).
children_view view_children(const std::vector<std::string>& children, std::uint64_t limit);

}  // namespace dlock::zk::detail
