// The ZooKeeper recipe's pure logic (src/zk/recipe.hpp): URL parsing, name encoding, lock-node
// names and how the recipe's driver applies the shared queue rules (core/queue_locate.hpp, tested
// in queue_locate_test.cpp) to a getChildren result. No server.
#include "zk/recipe.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include <dlock/error.hpp>

#include "core/status.hpp"

namespace {

using namespace dlock::zk::detail;

const std::string g1(32, 'a'), g2(32, 'b'), g3(32, 'c'), g4(32, 'd');

std::string node(const std::string& guid, bool read, int seq) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%010d", seq);
    return node_prefix(guid, read) + digits;
}

TEST(ZkUrl, ParsesHostListsAndBase) {
    std::error_code ec;
    auto e = parse_zk_url("zk://a:1,b:2,[::1]:3/locks/x", ec);
    ASSERT_FALSE(ec);
    EXPECT_EQ(e.hosts, "a:1,b:2,[::1]:3");
    EXPECT_EQ(e.base, "/locks/x");
    e = parse_zk_url("zk://a", ec);
    ASSERT_FALSE(ec);
    EXPECT_EQ(e.hosts, "a:2181");
    EXPECT_EQ(e.base, "/dlock");
    e = parse_zk_url("zk://a:5/", ec);
    ASSERT_FALSE(ec);
    EXPECT_EQ(e.base, "");
}

TEST(ZkUrl, RejectsMalformed) {
    for (const char* url :
         {"",           "zk:/a",     "http://a",     "zk://",       "zk:///x",
          "zk://a:",    "zk://a:0",  "zk://a:65536", "zk://a:1x",   "zk://a,/x",
          "zk://a//x",  "zk://a/x/", "zk://a/./x",   "zk://a/x/..", "zk://u:p@a",
          "zk://a/x?y", "zk://a#f",  "zk://[::1",    "zk://[::1]x", "zk://[]:1"}) {
        std::error_code ec;
        parse_zk_url(url, ec);
        EXPECT_EQ(ec, dlock::errc::invalid_argument) << url;
    }
}

TEST(ZkUrl, RejectedCredentialsAreNeverQuoted) {
    // The parser refuses credentials in the URL (they go in client_options.digest), and its
    // message quotes the URL: with any password hidden, even one holding '/', '?', '#', '@', ':'.
    for (const std::string_view password : {"S3cr/etP4", "S3cr?etP4", "S3cr#etP4", "S3cr@etP4",
                                            "S3cr:etP4", "S3cr/etP4?ssW0#rdX9@kL8m"}) {
        for (const std::string_view tail : {"@a", "@a:2181/locks", "@a:1,b:2", "@a:0", "@/x"}) {
            const std::string pw(password), t(tail);
            for (const std::string& url :
                 {"zk://u:" + pw + t, "zk://:" + pw + t, "zk:/u:" + pw + t}) {
                std::error_code ec;
                parse_zk_url(url, ec);
                ASSERT_EQ(ec, dlock::errc::invalid_argument) << url;
                const auto message = dlock::detail::message_for(ec);
                EXPECT_EQ(message.find("S3cr"), std::string::npos) << url << ": " << message;
                EXPECT_EQ(message.find("etP4"), std::string::npos) << url << ": " << message;
                EXPECT_EQ(message.find("kL8m"), std::string::npos) << url << ": " << message;
            }
        }
    }
}

TEST(ZkNames, EncodeIntoOneComponent) {
    EXPECT_EQ(encode_name("stock/sku-42"), "stock%2Fsku-42");
    EXPECT_EQ(encode_name("a%2F"), "a%252F");
    EXPECT_EQ(encode_name("."), "%2E");
    EXPECT_EQ(encode_name(".."), "%2E%2E");
    EXPECT_EQ(encode_name("..."), "...");
    EXPECT_EQ(encode_name("x y\n"), "x%20y%0A");
    EXPECT_EQ(encode_name("\xc3\xa9"), "%C3%A9");
}

TEST(ZkNodes, ParseOnlyOurNames) {
    const auto n = parse_node(node(g1, true, 7));
    ASSERT_TRUE(n);
    EXPECT_EQ(n->guid, g1);
    EXPECT_TRUE(n->read);
    EXPECT_EQ(n->sequence, 7);
    EXPECT_FALSE(parse_node("lock-0000000001"));
    EXPECT_FALSE(parse_node(g1 + "-xx-0000000001"));
    EXPECT_FALSE(parse_node(g1 + "-wr-00000000a1"));
}

std::string permit(const std::string& guid, std::uint32_t count, int seq) {
    char digits[16];
    std::snprintf(digits, sizeof digits, "%010d", seq);
    return permit_prefix(guid, count) + digits;
}

TEST(ZkDriver, LockKindsShareOneQueueOfWriteNodes) {
    // exclusive, reentrant, fair and write take write nodes; read takes read nodes.
    for (const auto kind : {dlock::lock_kind::exclusive, dlock::lock_kind::reentrant,
                            dlock::lock_kind::fair, dlock::lock_kind::write}) {
        const driver d(kind);
        EXPECT_EQ(d.prefix(g1), node_prefix(g1, false)) << dlock::to_string(kind);
        EXPECT_FALSE(d.permits());
        EXPECT_EQ(d.kind(), kind);
    }
    EXPECT_EQ(driver(dlock::lock_kind::read).prefix(g1), node_prefix(g1, true));
    EXPECT_EQ(driver(dlock::lock_kind::permits, 3).prefix(g1), permit_prefix(g1, 3));
}

TEST(ZkDriver, ExclusiveAndWriteStandings) {
    const std::vector<std::string> kids = {node(g1, true, 1), node(g2, false, 2),
                                           node(g3, false, 3)};
    for (const auto kind : {dlock::lock_kind::exclusive, dlock::lock_kind::write}) {
        const driver d(kind);
        auto st = d.locate(kids, node(g3, false, 3));
        EXPECT_TRUE(st.found);
        EXPECT_FALSE(st.holds);
        EXPECT_FALSE(st.watch_parent);
        EXPECT_FALSE(st.wake_successor);
        EXPECT_EQ(st.watch, node(g2, false, 2)) << "its immediate predecessor";
        st = d.locate({node(g3, false, 3)}, node(g3, false, 3));
        EXPECT_TRUE(st.holds);
        EXPECT_FALSE(st.wake_successor);
        EXPECT_FALSE(d.locate(kids, node(g4, false, 4)).found);
    }
}

TEST(ZkDriver, ReadStandings) {
    const driver d(dlock::lock_kind::read);
    const std::vector<std::string> kids = {node(g1, true, 1), node(g2, false, 2),
                                           node(g3, true, 3)};
    EXPECT_TRUE(d.locate(kids, node(g1, true, 1)).holds);
    const auto st = d.locate(kids, node(g3, true, 3));
    EXPECT_FALSE(st.holds);
    EXPECT_EQ(st.watch, node(g2, false, 2)) << "the nearest earlier writer";
}

TEST(ZkDriver, SemaphoreStandings) {
    const driver d(dlock::lock_kind::permits, 2);
    EXPECT_TRUE(d.permits());
    const std::vector<std::string> kids = {permit(g1, 1, 1), permit(g2, 2, 2), permit(g3, 1, 3)};
    auto st = d.locate(kids, permit(g1, 1, 1), 2);
    EXPECT_TRUE(st.holds);
    EXPECT_TRUE(st.wake_successor) << "a node follows: it may watch us";
    st = d.locate(kids, permit(g2, 2, 2), 2);
    EXPECT_FALSE(st.holds);
    EXPECT_TRUE(st.watch_parent) << "first waiter: the children and the permits";
    EXPECT_TRUE(st.watch.empty());
    st = d.locate(kids, permit(g3, 1, 3), 2);
    EXPECT_FALSE(st.holds);
    EXPECT_FALSE(st.watch_parent);
    EXPECT_EQ(st.watch, permit(g2, 2, 2));
    st = d.locate(kids, permit(g3, 1, 3), 4);
    EXPECT_TRUE(st.holds);
    EXPECT_FALSE(st.wake_successor) << "the last node";
}

TEST(ZkDriver, OneNameServesOneKind) {
    const auto lock_node = node(g1, false, 1), read_node = node(g1, true, 1);
    const auto sem_node = permit(g1, 1, 1);
    for (const auto kind :
         {dlock::lock_kind::exclusive, dlock::lock_kind::read, dlock::lock_kind::reentrant}) {
        const driver d(kind);
        EXPECT_TRUE(d.foreign(sem_node));
        EXPECT_FALSE(d.foreign(lock_node));
        EXPECT_FALSE(d.foreign(read_node));
        EXPECT_FALSE(d.foreign("foreign")) << "names of neither recipe are ignored";
    }
    const driver sem(dlock::lock_kind::permits);
    EXPECT_TRUE(sem.foreign(lock_node));
    EXPECT_TRUE(sem.foreign(read_node));
    EXPECT_FALSE(sem.foreign(sem_node));
    EXPECT_FALSE(sem.foreign("foreign"));
    EXPECT_EQ(sem.quoted("x"), "semaphore \"x\"");
    EXPECT_EQ(driver(dlock::lock_kind::fair).quoted("x"), "lock \"x\"");
}

TEST(ZkInspect, ViewOfLockChildren) {
    // Two readers, then a writer waiting, then a reader behind it (writer preference).
    const auto v = view_children(
        {node(g3, false, 3), node(g1, true, 1), node(g2, true, 2), node(g4, true, 4), "junk"}, 0);
    EXPECT_EQ(v.readers, 2u);
    EXPECT_FALSE(v.writer);
    EXPECT_EQ(v.lock_waiters, 2u);
    EXPECT_TRUE(v.any_read);
    EXPECT_EQ(v.foreign, 1u);
    EXPECT_EQ(v.holding.size(), 2u);

    const auto w = view_children({node(g2, false, 7), node(g1, false, 5)}, 0);
    EXPECT_TRUE(w.writer);
    EXPECT_EQ(w.lock_waiters, 1u);
    ASSERT_EQ(w.holding.size(), 1u);
    EXPECT_EQ(w.holding.front(), node(g1, false, 5));
}

TEST(ZkInspect, ViewOfSemaphoreChildren) {
    // limit 3: 2 + 1 hold, the next 1 waits (first come first served, also behind a big one).
    const auto v = view_children({permit(g1, 2, 1), permit(g2, 1, 2), permit(g3, 1, 3)}, 3);
    EXPECT_EQ(v.permit_holders, 2u);
    EXPECT_EQ(v.permits_in_use, 3u);
    EXPECT_EQ(v.permit_waiters, 1u);
    const auto w = view_children({permit(g1, 5, 1), permit(g2, 1, 2)}, 3);
    EXPECT_EQ(w.permit_holders, 0u);
    EXPECT_EQ(w.permit_waiters, 2u);
}

}  // namespace
