// RESP2 codec: exact command bytes, and byte-level reply feeds (whole, split, batched, malformed).
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/reply.hpp>

#include "core/status.hpp"
#include "redis/codec.hpp"

namespace {

using namespace std::string_view_literals;
using dlock::redis::reply;
using dlock::redis::detail::append_command;
using dlock::redis::detail::reply_decoder;
using kind = reply::kind;

std::string encode(const std::vector<std::string_view>& args) {
    std::string out;
    append_command(out, args);
    return out;
}

// Feeds `bytes` at once and decodes exactly one reply.
reply decode_one(std::string_view bytes) {
    reply_decoder d;
    std::error_code ec;
    d.feed(bytes, ec);
    EXPECT_FALSE(ec) << dlock::detail::message_for(ec);
    reply r;
    r.type = kind::status;
    r.text = "sentinel";
    EXPECT_TRUE(d.next(r, ec)) << "incomplete: " << bytes;
    EXPECT_FALSE(ec) << dlock::detail::message_for(ec);
    reply none;
    EXPECT_FALSE(d.next(none, ec)) << "trailing reply after " << bytes;
    EXPECT_FALSE(ec);
    return r;
}

// ---- append_command -------------------------------------------------------------------------

TEST(AppendCommand, SetKeyValue) {
    EXPECT_EQ(encode({"SET", "k", "v"}), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

TEST(AppendCommand, BinarySafeArguments) {
    const auto value = "a\0b\r\nc"sv;
    ASSERT_EQ(value.size(), 6u);
    const auto bytes = encode({"SET", "k\0"sv, value});
    EXPECT_EQ(bytes, "*3\r\n$3\r\nSET\r\n$2\r\nk\0\r\n$6\r\na\0b\r\nc\r\n"sv);
}

TEST(AppendCommand, EmptyArgument) {
    EXPECT_EQ(encode({"GET", ""}), "*2\r\n$3\r\nGET\r\n$0\r\n\r\n");
}

TEST(AppendCommand, AppendsWithoutClearing) {
    std::string out = "prefix|";
    append_command(out, {"PING"});
    append_command(out, {"ECHO", "hi"});
    EXPECT_EQ(out, "prefix|*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n");
}

TEST(AppendCommand, LongArgumentLength) {
    const std::string big(100'000, 'z');
    const auto bytes = encode({"SET", "k", big});
    EXPECT_EQ(bytes.substr(0, 29), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n");
    EXPECT_EQ(bytes.size(), 29 + big.size() + 2);
    EXPECT_EQ(bytes.substr(bytes.size() - 3), "z\r\n");
}

TEST(AppendCommand, RoundTripsThroughTheDecoder) {
    // A command is itself a valid RESP array of bulk strings.
    const auto r = decode_one(encode({"SET", "k\0"sv, "a\r\nb"}));
    ASSERT_EQ(r.type, kind::array);
    ASSERT_EQ(r.elements.size(), 3u);
    EXPECT_EQ(r.elements[1].text, "k\0"sv);
    EXPECT_EQ(r.elements[2].text, "a\r\nb");
}

// ---- reply_decoder: each type ---------------------------------------------------------------

TEST(ReplyDecoder, Status) {
    const auto r = decode_one("+OK\r\n");
    EXPECT_EQ(r.type, kind::status);
    EXPECT_EQ(r.text, "OK");
    EXPECT_FALSE(r.is_error());
    EXPECT_FALSE(r.is_nil());
}

TEST(ReplyDecoder, Error) {
    const auto r = decode_one("-ERR x\r\n");
    EXPECT_EQ(r.type, kind::error);
    EXPECT_EQ(r.text, "ERR x");
    EXPECT_TRUE(r.is_error());
}

TEST(ReplyDecoder, Integer) {
    EXPECT_EQ(decode_one(":42\r\n").type, kind::integer);
    EXPECT_EQ(decode_one(":42\r\n").integer, 42);
    EXPECT_EQ(decode_one(":-7\r\n").integer, -7);
    EXPECT_EQ(decode_one(":0\r\n").integer, 0);
    EXPECT_EQ(decode_one(":9223372036854775807\r\n").integer, 9223372036854775807LL);
}

TEST(ReplyDecoder, BulkString) {
    const auto r = decode_one("$3\r\nabc\r\n");
    EXPECT_EQ(r.type, kind::string);
    EXPECT_EQ(r.text, "abc");
    EXPECT_TRUE(r.elements.empty());
}

TEST(ReplyDecoder, BinaryBulkString) {
    const auto r = decode_one("$5\r\na\0\r\nb\r\n"sv);
    EXPECT_EQ(r.type, kind::string);
    EXPECT_EQ(r.text, "a\0\r\nb"sv);
}

TEST(ReplyDecoder, EmptyBulkString) {
    const auto r = decode_one("$0\r\n\r\n");
    EXPECT_EQ(r.type, kind::string);
    EXPECT_EQ(r.text, "");
    EXPECT_FALSE(r.is_nil());
}

TEST(ReplyDecoder, NilBulk) {
    const auto r = decode_one("$-1\r\n");
    EXPECT_EQ(r.type, kind::nil);
    EXPECT_TRUE(r.is_nil());
    EXPECT_TRUE(r.text.empty());
}

TEST(ReplyDecoder, Array) {
    const auto r = decode_one("*2\r\n:1\r\n$2\r\nhi\r\n");
    ASSERT_EQ(r.type, kind::array);
    ASSERT_EQ(r.elements.size(), 2u);
    EXPECT_EQ(r.elements[0].type, kind::integer);
    EXPECT_EQ(r.elements[0].integer, 1);
    EXPECT_EQ(r.elements[1].type, kind::string);
    EXPECT_EQ(r.elements[1].text, "hi");
}

TEST(ReplyDecoder, EmptyArray) {
    const auto r = decode_one("*0\r\n");
    EXPECT_EQ(r.type, kind::array);
    EXPECT_TRUE(r.elements.empty());
}

TEST(ReplyDecoder, NestedArrays) {
    const auto r = decode_one("*3\r\n*2\r\n+a\r\n:2\r\n*0\r\n*1\r\n*1\r\n$-1\r\n");
    ASSERT_EQ(r.type, kind::array);
    ASSERT_EQ(r.elements.size(), 3u);
    const auto& first = r.elements[0];
    ASSERT_EQ(first.type, kind::array);
    ASSERT_EQ(first.elements.size(), 2u);
    EXPECT_EQ(first.elements[0].type, kind::status);
    EXPECT_EQ(first.elements[0].text, "a");
    EXPECT_EQ(first.elements[1].integer, 2);
    EXPECT_EQ(r.elements[1].type, kind::array);
    EXPECT_TRUE(r.elements[1].elements.empty());
    const auto& third = r.elements[2];
    ASSERT_EQ(third.type, kind::array);
    ASSERT_EQ(third.elements.size(), 1u);
    ASSERT_EQ(third.elements[0].type, kind::array);
    ASSERT_EQ(third.elements[0].elements.size(), 1u);
    EXPECT_TRUE(third.elements[0].elements[0].is_nil());
}

TEST(ReplyDecoder, NilArray) {
    const auto r = decode_one("*-1\r\n");
    EXPECT_EQ(r.type, kind::nil);
    EXPECT_TRUE(r.elements.empty());
}

TEST(ReplyDecoder, ArrayWithNilAndErrorElements) {
    const auto r = decode_one("*3\r\n$-1\r\n-WRONGTYPE bad\r\n$1\r\nx\r\n");
    ASSERT_EQ(r.elements.size(), 3u);
    EXPECT_TRUE(r.elements[0].is_nil());
    EXPECT_TRUE(r.elements[1].is_error());
    EXPECT_EQ(r.elements[1].text, "WRONGTYPE bad");
    EXPECT_EQ(r.elements[2].text, "x");
}

// ---- reply_decoder: framing -----------------------------------------------------------------

TEST(ReplyDecoder, NothingFedMeansNoReply) {
    reply_decoder d;
    std::error_code ec;
    reply r;
    EXPECT_FALSE(d.next(r, ec));
    EXPECT_FALSE(ec);
}

TEST(ReplyDecoder, ReplySplitByteByByte) {
    const std::string wire = "*3\r\n$5\r\nhe\r\no\r\n:-12\r\n*2\r\n+OK\r\n$-1\r\n";
    reply_decoder d;
    std::error_code ec;
    reply r;
    for (std::size_t i = 0; i + 1 < wire.size(); ++i) {
        d.feed(std::string_view(wire).substr(i, 1), ec);
        ASSERT_FALSE(ec);
        ASSERT_FALSE(d.next(r, ec)) << "complete after only " << i + 1 << " bytes";
        ASSERT_FALSE(ec) << dlock::detail::message_for(ec);
    }
    d.feed(std::string_view(wire).substr(wire.size() - 1), ec);
    ASSERT_TRUE(d.next(r, ec));
    EXPECT_FALSE(ec);
    ASSERT_EQ(r.type, kind::array);
    ASSERT_EQ(r.elements.size(), 3u);
    EXPECT_EQ(r.elements[0].text, "he\r\no");
    EXPECT_EQ(r.elements[1].integer, -12);
    ASSERT_EQ(r.elements[2].elements.size(), 2u);
    EXPECT_EQ(r.elements[2].elements[0].text, "OK");
    EXPECT_TRUE(r.elements[2].elements[1].is_nil());
    EXPECT_FALSE(d.next(r, ec));
}

TEST(ReplyDecoder, SeveralRepliesInOneFeed) {
    reply_decoder d;
    std::error_code ec;
    d.feed("+OK\r\n:1\r\n$-1\r\n-ERR no\r\n$3\r\nabc\r\n*1\r\n:5\r\n+PAR", ec);
    ASSERT_FALSE(ec);
    std::vector<reply> got;
    reply r;
    while (d.next(r, ec)) got.push_back(r);
    ASSERT_FALSE(ec);
    ASSERT_EQ(got.size(), 6u);
    EXPECT_EQ(got[0].text, "OK");
    EXPECT_EQ(got[1].integer, 1);
    EXPECT_TRUE(got[2].is_nil());
    EXPECT_EQ(got[3].text, "ERR no");
    EXPECT_EQ(got[4].text, "abc");
    ASSERT_EQ(got[5].elements.size(), 1u);
    EXPECT_EQ(got[5].elements[0].integer, 5);
    // The partial "+PAR" completes with the next feed.
    d.feed("TIAL\r\n", ec);
    ASSERT_TRUE(d.next(r, ec));
    EXPECT_EQ(r.type, kind::status);
    EXPECT_EQ(r.text, "PARTIAL");
}

TEST(ReplyDecoder, ResetDropsBufferedBytes) {
    reply_decoder d;
    std::error_code ec;
    d.feed("$10\r\nhalf", ec);
    reply r;
    ASSERT_FALSE(d.next(r, ec));
    d.reset();
    d.feed("+fresh\r\n", ec);
    ASSERT_TRUE(d.next(r, ec));
    EXPECT_FALSE(ec);
    EXPECT_EQ(r.text, "fresh");
}

// ---- reply_decoder: malformed input ---------------------------------------------------------

// Feeds `bytes` and drains; expects errc::protocol_error and no reply.
void expect_protocol_error(std::string_view bytes) {
    SCOPED_TRACE(std::string(bytes));
    reply_decoder d;
    std::error_code ec;
    d.feed(bytes, ec);
    reply r;
    bool got = false;
    for (int i = 0; i < 4 && !ec; ++i) got = d.next(r, ec) || got;
    EXPECT_EQ(ec, dlock::errc::protocol_error) << "decoded type " << static_cast<int>(r.type);
    EXPECT_FALSE(got);
    EXPECT_NE(dlock::detail::message_for(ec).find("invalid reply"), std::string::npos)
        << dlock::detail::message_for(ec);

    // The decoder stays broken until reset(): further feeds and reads report the error.
    std::error_code again;
    d.feed("+OK\r\n", again);
    if (!again) d.next(r, again);
    EXPECT_EQ(again, dlock::errc::protocol_error);

    d.reset();
    std::error_code fresh;
    d.feed("+OK\r\n", fresh);
    ASSERT_TRUE(d.next(r, fresh));
    EXPECT_FALSE(fresh);
    EXPECT_EQ(r.text, "OK");
}

TEST(ReplyDecoderMalformed, UnknownTypeByte) { expect_protocol_error("!garbage\r\n"); }

TEST(ReplyDecoderMalformed, HttpResponse) { expect_protocol_error("HTTP/1.1 200 OK\r\n"); }

TEST(ReplyDecoderMalformed, NonNumericBulkLength) { expect_protocol_error("$abc\r\n"); }

TEST(ReplyDecoderMalformed, NonNumericArrayLength) { expect_protocol_error("*x\r\n"); }

TEST(ReplyDecoderMalformed, NonNumericInteger) { expect_protocol_error(":4x2\r\n"); }

TEST(ReplyDecoderMalformed, GarbageInsideAnArray) { expect_protocol_error("*2\r\n:1\r\n?\r\n"); }

TEST(ReplyDecoderMalformed, NegativeLengthsOtherThanNil) {
    expect_protocol_error("$-2\r\n");
    expect_protocol_error("*-5\r\n");
}

TEST(ReplyDecoderMalformed, EmptyInteger) { expect_protocol_error(":\r\n"); }

TEST(ReplyDecoderMalformed, BulkLongerThanDeclared) {
    // Declared length 1, but 3 bytes come before the CRLF. hiredis 0.14 does not check the bulk
    // terminator, so it hands out the declared byte and then fails on the leftover "\r\n" (wrong
    // type byte). The decoder must never read past the declared length, and must end in an error.
    reply_decoder d;
    std::error_code ec;
    d.feed("$1\r\nabc\r\n", ec);
    ASSERT_FALSE(ec);
    std::vector<reply> got;
    reply r;
    for (int i = 0; i < 4 && !ec; ++i) {
        if (d.next(r, ec)) got.push_back(r);
    }
    EXPECT_EQ(ec, dlock::errc::protocol_error);
    for (const auto& g : got) EXPECT_EQ(g.text.size(), 1u) << g.text;
}

}  // namespace
