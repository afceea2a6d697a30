// The ZooKeeper session's services for the acquire loop (src/zk/session.hpp), against the shared
// standalone server through a zk_proxy that loses chosen requests or replies: create_protected
// finds a create whose reply was lost by its guid instead of making a second node, and
// remove_guaranteed deletes a node (or a create in doubt) once reconnected.
#include <gtest/gtest.h>

#include <zookeeper/proto.h>

#include <chrono>
#include <string>

#include "core/token.hpp"
#include "test_env.hpp"
#include "zk/recipe.hpp"
#include "zk/session.hpp"
#include "zk_server.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::eventually;
using dlock::test::scaled;
using dlock::test::shared_zk;
using dlock::zk::detail::protected_node;
using dlock::zk::detail::session;
using steady = std::chrono::steady_clock;

/// A session through `proxy` and a fresh persistent parent node for this test's children.
struct fixture {
    dlock::test::zk_proxy proxy{shared_zk().client_port(0)};
    session s{[] {}};
    std::string parent = "/" + dlock::zk::detail::encode_name(dlock::test::unique_name());

    fixture() {
        std::string why;
        if (!s.open(proxy.host(), 4s, steady::now() + scaled(10s), why))
            throw std::runtime_error("session: " + why);
        const int rc = s.with_handle([&](zhandle_t* zh) {
            return zoo_create(zh, parent.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
        });
        if (rc != ZOK) throw std::runtime_error("create " + parent + ": " + zerror(rc));
    }
    ~fixture() { shared_zk().remove(parent); }

    protected_node node() const {
        protected_node n;
        n.parent = parent;
        n.guid = dlock::detail::random_token();
        n.prefix = dlock::zk::detail::node_prefix(n.guid, false);
        return n;
    }
    std::size_t children() const { return shared_zk().children(parent).size(); }
    bool reconnected() { return s.wait_connected(steady::now() + scaled(10s), {}); }
};

TEST(ZkSession, CreateProtectedFindsACreateWhoseReplyWasLost) {
    fixture f;
    auto n = f.node();
    f.proxy.drop_reply_next(ZOO_CREATE2_OP);
    const int lost = f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE);
    EXPECT_TRUE(lost == ZCONNECTIONLOSS || lost == ZOPERATIONTIMEOUT) << zerror(lost);
    EXPECT_EQ(f.proxy.dropped(), 1);
    EXPECT_TRUE(n.in_doubt);
    EXPECT_FALSE(n.created());
    ASSERT_EQ(f.children(), 1u) << "the create took effect on the server";
    ASSERT_TRUE(f.reconnected());
    ASSERT_EQ(f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE), ZOK);
    EXPECT_FALSE(n.in_doubt);
    ASSERT_TRUE(n.created());
    EXPECT_GT(n.czxid, 0u);
    const auto kids = shared_zk().children(f.parent);
    ASSERT_EQ(kids.size(), 1u) << "found by its guid, not created twice";
    EXPECT_EQ(kids.front(), n.name);
    EXPECT_EQ(f.s.remove_guaranteed(n.path()), ZOK);
    EXPECT_EQ(f.children(), 0u);
}

TEST(ZkSession, CreateProtectedCreatesAgainWhenTheLostCreateNeverLanded) {
    fixture f;
    auto n = f.node();
    f.proxy.drop_next(ZOO_CREATE2_OP);  // the server never sees it
    const int lost = f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE);
    EXPECT_TRUE(lost == ZCONNECTIONLOSS || lost == ZOPERATIONTIMEOUT) << zerror(lost);
    EXPECT_TRUE(n.in_doubt);
    EXPECT_EQ(f.children(), 0u);
    ASSERT_TRUE(f.reconnected());
    ASSERT_EQ(f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE), ZOK);
    EXPECT_TRUE(n.created());
    EXPECT_EQ(f.children(), 1u);
    // ZNONODE: a missing parent is the caller's to make; nothing is in doubt.
    auto orphan = f.node();
    orphan.parent = f.parent + "/missing";
    EXPECT_EQ(f.s.create_protected(orphan, &ZOO_OPEN_ACL_UNSAFE), ZNONODE);
    EXPECT_FALSE(orphan.in_doubt);
    EXPECT_FALSE(orphan.created());
    EXPECT_EQ(f.s.remove_guaranteed(n.path()), ZOK);
}

TEST(ZkSession, RemoveGuaranteedRetriesADeleteLostWithTheConnection) {
    fixture f;
    auto n = f.node();
    ASSERT_EQ(f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE), ZOK);
    f.proxy.drop_next(ZOO_DELETE_OP);
    const int lost = f.s.remove_guaranteed(n.path());
    EXPECT_TRUE(lost == ZCONNECTIONLOSS || lost == ZOPERATIONTIMEOUT) << zerror(lost);
    EXPECT_EQ(f.proxy.dropped(), 1);
    EXPECT_EQ(f.children(), 1u) << "the delete never reached the server";
    // The client's background thread runs run_cleanup on every wake-up; here the test does.
    EXPECT_TRUE(eventually(
        [&] {
            f.s.run_cleanup();
            return f.children() == 0;
        },
        scaled(10s)))
        << "the queued delete was sent once reconnected";
    EXPECT_EQ(f.s.remove_guaranteed(n.path()), ZNONODE) << "already gone: nothing queued";
}

TEST(ZkSession, RemoveGuaranteedDeletesACreateInDoubtByItsGuid) {
    // An acquire that gives up while its create is in doubt (canceled, deadline) leaves no node:
    // every child named with its guid is deleted once reconnected, and no other.
    fixture f;
    auto other = f.node();
    ASSERT_EQ(f.s.create_protected(other, &ZOO_OPEN_ACL_UNSAFE), ZOK);
    auto n = f.node();
    f.proxy.drop_reply_next(ZOO_CREATE2_OP);
    const int lost = f.s.create_protected(n, &ZOO_OPEN_ACL_UNSAFE);
    EXPECT_TRUE(lost == ZCONNECTIONLOSS || lost == ZOPERATIONTIMEOUT) << zerror(lost);
    ASSERT_TRUE(n.in_doubt);
    ASSERT_EQ(f.children(), 2u);
    f.s.remove_guaranteed(n);
    EXPECT_TRUE(eventually(
        [&] {
            f.s.run_cleanup();
            return f.children() == 1;
        },
        scaled(10s)));
    const auto kids = shared_zk().children(f.parent);
    ASSERT_EQ(kids.size(), 1u);
    EXPECT_EQ(kids.front(), other.name) << "only the nodes of the create in doubt";
    EXPECT_EQ(f.s.remove_guaranteed(other.path()), ZOK);
}

TEST(ZkSession, AWatchOnANodeAlreadyGoneLeavesNoWatchOnTheServer) {
    // A waiter's watch on the node ahead (pred, or the look-again probe), and a holder's on its
    // own node, may be set after that node went. With exists, ZooKeeper would keep a watch for
    // the node's creation, which never comes (a sequential node's name is never made again),
    // until the session ends: one more per such race on a long-lived client. getData leaves none.
    fixture f;
    const std::string pred = f.parent + "/gone-pred-0000000001";
    const std::string probed = f.parent + "/gone-probed-0000000002";
    const std::string mine = f.parent + "/gone-mine-0000000003";
    const auto seen = f.s.watch_begin(probed);
    f.s.watch_probe(probed);
    EXPECT_TRUE(f.s.watch_wait(probed, seen, steady::now() + scaled(10s), {}))
        << "a probe of a node already gone fires as its deletion";
    f.s.watch_end(probed);
    f.s.prewatch(mine);
    Stat stat{};
    EXPECT_EQ(f.s.with_handle([&](zhandle_t* zh) { return f.s.watch_node(zh, pred, &stat); }),
              ZNONODE);
    // Each of the three went out before this synchronous read, and one session's requests are
    // answered in order: their watches, if any, are on the server now.
    EXPECT_EQ(f.s.with_handle([&](zhandle_t* zh) { return zoo_exists(zh, "/", 0, &stat); }), ZOK);
    EXPECT_EQ(shared_zk().watchers(pred), 0u);
    EXPECT_EQ(shared_zk().watchers(probed), 0u);
    EXPECT_EQ(shared_zk().watchers(mine), 0u);
    f.s.disown(mine);
}

TEST(ZkSession, ANodeWeMayNotReadIsNoWakeUp) {
    // A node of another identity (a client with a digest, CREATOR_ALL_ACL) under an open parent:
    // getData answers ZNOAUTH and sets no watch, and the server would not tell us of its going
    // anyway. As the node ahead, that is an error (errc::auth_failed, docs/zookeeper.md); as the
    // node to look again on, the probe fires nothing: fired, its waiter would look again and
    // probe again at once, for as long as the node stays.
    fixture f;
    session other{[] {}};
    std::string why;
    ASSERT_TRUE(other.open(shared_zk().hosts(), 4s, steady::now() + scaled(10s), why)) << why;
    ASSERT_EQ(other.add_digest("other:secret", steady::now() + scaled(10s)), ZOK);
    const std::string node = f.parent + "/other-0000000001";
    ASSERT_EQ(other.with_handle([&](zhandle_t* zh) {
        return zoo_create(zh, node.c_str(), nullptr, -1, &ZOO_CREATOR_ALL_ACL, 0, nullptr, 0);
    }),
              ZOK);
    Stat stat{};
    EXPECT_EQ(f.s.with_handle([&](zhandle_t* zh) { return f.s.watch_node(zh, node, &stat); }),
              ZNOAUTH);
    const auto seen = f.s.watch_begin(node);
    f.s.watch_probe(node);
    // Answered in order: the probe's ZNOAUTH came back before this read's answer.
    EXPECT_EQ(f.s.with_handle([&](zhandle_t* zh) { return zoo_exists(zh, "/", 0, &stat); }), ZOK);
    // Waited on as the second watch, a fired one answers `also` (any firing, not only a deletion).
    const std::string first = f.parent + "/none";
    const auto first_seen = f.s.watch_begin(first);
    EXPECT_EQ(f.s.watch_wait(first, first_seen, &node, seen, steady::now(), {}),
              session::woken::other)
        << "a probe we may not read fired its watch";
    f.s.watch_end(first);
    f.s.watch_end(node);
    EXPECT_EQ(shared_zk().watchers(node), 0u);
    EXPECT_TRUE(shared_zk().remove(node));
}

}  // namespace
