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

}  // namespace
