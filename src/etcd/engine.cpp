#include "etcd/engine.hpp"

#include <grpcpp/grpcpp.h>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <fstream>
#include <limits>
#include <sstream>
#include <mutex>
#include <utility>

#include "core/callbacks.hpp"
#include "core/status.hpp"
#include "core/token.hpp"
#include "core/validate.hpp"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/tls_probe.hpp"

namespace dlock::etcd::detail {

using dlock::detail::fail;
using namespace std::chrono_literals;
namespace pb = etcdserverpb;

/// The generated stubs of one endpoint, over one channel.
struct stubs {
    std::string host;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::KV::Stub> kv;
    std::unique_ptr<pb::Watch::Stub> watch;
    std::unique_ptr<pb::Lease::Stub> lease;
    std::unique_ptr<pb::Auth::Stub> auth;
};

/// The client's one LeaseKeepAlive stream (gRPC's callback API, so no thread of ours blocks on
/// it): the background thread writes one keep-alive at a time (send()), every answer goes to
/// engine::keep_alive_answered, and the end of the stream to engine::keep_alive_broken. A hold
/// keeps the call open until close(), so send() may run outside gRPC's reactions at any time
/// before it; close() cancels the call and waits for OnDone, after which it may be destroyed.
class keep_alive_stream final
    : public grpc::ClientBidiReactor<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse> {
public:
    keep_alive_stream(engine& owner, pb::Lease::Stub& stub) : owner_(owner) {
        owner_.add_token(ctx_);
        stub.async()->LeaseKeepAlive(&ctx_, this);
        AddHold();
        StartRead(&resp_);
        StartCall();
    }
    keep_alive_stream(const keep_alive_stream&) = delete;
    keep_alive_stream& operator=(const keep_alive_stream&) = delete;
    ~keep_alive_stream() override = default;

    /// Writes a keep-alive of lease `id`; false when the stream is broken or a write is still in
    /// flight (the caller reopens the stream).
    bool send(std::int64_t id) {
        {
            const std::lock_guard lock(m_);
            if (broken_ || writing_) return false;
            writing_ = true;
        }
        req_.set_id(id);
        StartWrite(&req_);
        return true;
    }

    /// Cancels the call and waits until gRPC is done with it. Idempotent.
    void close() noexcept {
        ctx_.TryCancel();
        bool release = false;
        {
            const std::lock_guard lock(m_);
            release = !released_;
            released_ = true;
        }
        if (release) RemoveHold();
        std::unique_lock lock(m_);
        done_cv_.wait(lock, [&] { return done_; });
    }

    void OnWriteDone(bool ok) override {
        {
            const std::lock_guard lock(m_);
            writing_ = false;
            if (ok) return;
            broken_ = true;
        }
        owner_.keep_alive_broken();
    }

    void OnReadDone(bool ok) override {
        if (!ok) {
            {
                const std::lock_guard lock(m_);
                broken_ = true;
            }
            owner_.keep_alive_broken();
            return;
        }
        owner_.keep_alive_answered(resp_.id(), resp_.ttl());
        StartRead(&resp_);
    }

    void OnDone(const grpc::Status& /*status*/) override {
        const std::lock_guard lock(m_);
        broken_ = true;
        done_ = true;
        done_cv_.notify_all();
    }

private:
    engine& owner_;
    grpc::ClientContext ctx_;
    pb::LeaseKeepAliveRequest req_;    // the write in flight (writing_)
    pb::LeaseKeepAliveResponse resp_;  // the read in flight
    std::mutex m_;                     // guards the flags below
    std::condition_variable done_cv_;
    bool writing_ = false;
    bool broken_ = false;
    bool released_ = false;
    bool done_ = false;
};

/// A wait's Watch call. Once its event came, the background thread cancels and finishes it (the
/// stream drained, its status read): canceling a call costs the calling thread about as much as
/// a read round trip, so the waiter goes straight on to its attempt.
class engine::ending_watch {
public:
    explicit ending_watch(engine& owner) : owner_(owner) {}
    ending_watch(const ending_watch&) = delete;
    ending_watch& operator=(const ending_watch&) = delete;
    ~ending_watch() {
        if (stream) {
            ctx.TryCancel();
            pb::WatchResponse drain;
            while (stream->Read(&drain)) {
            }
            stream->Finish();
        }
        dlock::detail::lock_guard lock(owner_.mutex_);
        owner_.waits_.erase(&ctx);
    }

    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> stream;

private:
    engine& owner_;
};

/// One acquire call's state between the steps of its acquire_policy.
struct engine::attempt_state {
    std::string_view name;
    std::string prefix;  // the lock's key prefix
    std::string quoted;  // for messages
    const lock_options& options;
    steady::time_point deadline;
    lock_kind kind = lock_kind::exclusive;
    std::uint32_t count = 1;        // permits: how many this acquire takes
    std::uint32_t limit = 1;        // permits: the number to set when none is set yet
    std::string guid{};             // read, permits: this acquire's part of its key (recipe.hpp)
    std::string limit_key{};        // permits: where the semaphore's number of permits is
    std::uint64_t permits = 0;      // permits: the number found there by the latest attempt
    bool permits_reported = false;  // a mismatch with `limit` was reported once
    standing where{};               // the latest attempt's standing (what to watch)
    std::uint64_t ticket = 0;       // this call's place in the lock's local line (turns_)
    std::uint64_t turn = 0;         // the lock's local turn (= ticket) while this call has it
    bool local_wait = false;        // the last attempt found the turn taken in this client
    std::shared_ptr<session> s{};   // the session our key lives by
    std::string key{};              // our key (empty before the first put)
    std::int64_t revision = 0;      // its create revision (0: unknown)
    std::int64_t seen = 0;          // the revision at which the queue was read
    steady::time_point sent{};      // the latest attempt's send time
    std::string failure{};          // a failed attempt's message
};

namespace {

/// The least time a connection attempt to a member gets (gRPC's GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
/// see the constructor): longer than a loaded member takes to answer, short enough that an
/// attempt lost to a silent address is retried within seconds of the path coming back.
constexpr milliseconds min_connect_attempt{5000};

std::string ms_text(milliseconds d) { return std::to_string(d.count()) + "ms"; }

std::chrono::system_clock::time_point wall(steady::time_point t) {
    const auto now = steady::now();
    if (t >= now + std::chrono::hours(24 * 365))
        return std::chrono::system_clock::now() + std::chrono::hours(24 * 365);
    return std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(t - now);
}

/// Worth another try on another member: unreachable, or no answer in time (every request the
/// engine retries is idempotent: the put is guarded by create revision 0, deletes by the key's
/// create revision).
bool retriable(const grpc::Status& st) {
    return st.error_code() == grpc::StatusCode::UNAVAILABLE ||
           st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
           st.error_code() == grpc::StatusCode::UNKNOWN;
}

errc code_for(const grpc::Status& st) {
    // With auth enabled, a request without a (valid) user is refused with these.
    if (st.error_message().find("user name is empty") != std::string::npos ||
        st.error_message().find("permission denied") != std::string::npos)
        return errc::auth_failed;
    switch (st.error_code()) {
        case grpc::StatusCode::UNAUTHENTICATED:
        case grpc::StatusCode::PERMISSION_DENIED: return errc::auth_failed;
        case grpc::StatusCode::UNAVAILABLE:
        case grpc::StatusCode::DEADLINE_EXCEEDED:
        case grpc::StatusCode::CANCELLED: return errc::connection_failed;
        default: return errc::server_error;
    }
}

std::string status_text(const grpc::Status& st) {
    return st.error_message() + " (gRPC " + std::to_string(static_cast<int>(st.error_code())) + ")";
}

/// gRPC's target for "host:port": an IP address needs no resolver (ipv4: / ipv6:), a name goes
/// through DNS.
std::string channel_target(const std::string& host) {
    if (host.starts_with('[')) return "ipv6:" + host;
    const auto name = host.substr(0, host.rfind(':'));
    if (!name.empty() && name.find_first_not_of("0123456789.") == std::string::npos)
        return "ipv4:" + host;
    return "dns:///" + host;
}

/// The text of a PEM file named by TLS option `field`; errc::invalid_argument naming it when it
/// cannot be read.
std::string read_pem(const std::string& path, const char* field) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (in) text << in.rdbuf();
    if (!in || text.str().empty()) {
        const int err = errno;
        throw error(
            errc::invalid_argument,
            std::string("etcd: TLS ") + field + " \"" + path + "\" cannot be read" +
                (err != 0 ? ": " + std::system_category().message(err) : std::string(" (empty)")));
    }
    return text.str();
}

/// gRPC's channel credentials for `ep`: plain TCP for etcd://; for etcds://, TLS verified against
/// the CA file (else gRPC's default roots) and the members' address or tls server_name, with a
/// client certificate when one is given; insecure_skip_verify verifies nothing.
std::shared_ptr<grpc::ChannelCredentials> credentials_for(const etcd_endpoint& ep,
                                                          grpc::ChannelArguments& args) {
    if (!ep.secure) return grpc::InsecureChannelCredentials();
    const auto& t = ep.tls;
    std::string cert, key;
    if (!t.cert_file.empty()) {
        cert = read_pem(t.cert_file, "cert_file");
        key = read_pem(t.key_file, "key_file");
    }
    if (!t.server_name.empty()) args.SetSslTargetNameOverride(t.server_name);
    if (t.insecure_skip_verify) {
        namespace gx = grpc::experimental;
        gx::TlsChannelCredentialsOptions o;
        o.set_verify_server_certs(false);
        o.set_check_call_host(false);
        o.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
        if (!cert.empty()) {
            o.set_certificate_provider(std::make_shared<gx::StaticDataCertificateProvider>(
                std::vector<gx::IdentityKeyCertPair>{{key, cert}}));
            o.watch_identity_key_cert_pairs();
        }
        auto creds = gx::TlsCredentials(o);
        if (!creds) throw error(errc::unsupported, "etcd: gRPC refused tls insecure_skip_verify");
        return creds;
    }
    grpc::SslCredentialsOptions o;
    if (!t.ca_file.empty()) o.pem_root_certs = read_pem(t.ca_file, "ca_file");
    o.pem_private_key = std::move(key);
    o.pem_cert_chain = std::move(cert);
    return grpc::SslCredentials(o);
}

/// The lease is gone on the server ("etcdserver: requested lease not found").
bool lease_gone(const grpc::Status& st) { return st.error_code() == grpc::StatusCode::NOT_FOUND; }

void compare_create(pb::Compare& c, const std::string& key, std::int64_t revision) {
    c.set_result(pb::Compare_CompareResult_EQUAL);
    c.set_target(pb::Compare_CompareTarget_CREATE);
    c.set_key(key);
    c.set_create_revision(revision);
}

/// Every key under `prefix`, in create order, without values (the recipe's queue).
void range_queue(pb::RangeRequest& r, const std::string& prefix) {
    r.set_key(prefix);
    r.set_range_end(prefix_range_end(prefix));
    r.set_sort_target(pb::RangeRequest_SortTarget_CREATE);
    r.set_sort_order(pb::RangeRequest_SortOrder_ASCEND);
    r.set_keys_only(true);
}

/// The queue entries of a range_queue answer (recipe.hpp). A key with another '/' after the
/// prefix belongs to a lock of a longer name ("N/x/<lease>" under lock N's "N/") and is not in
/// this lock's queue. Leaving it out is safe with etcd's own recipe too: a concurrency.Mutex (or
/// `etcdctl lock`) on N waits for every key under "N/" created before its own, ours included.
std::vector<dlock::detail::queue_entry> entries_in(const pb::RangeResponse& r,
                                                   const std::string& prefix) {
    std::vector<dlock::detail::queue_entry> out;
    out.reserve(static_cast<std::size_t>(r.kvs_size()));
    for (const auto& kv : r.kvs()) {
        if (kv.key().find('/', prefix.size()) != std::string::npos) continue;
        out.push_back(entry_of(prefix, kv.key(), kv.create_revision()));
    }
    return out;
}

}  // namespace

engine::engine(client_options options) : options_(std::move(options)) {
    const auto positive = [](milliseconds d, const char* field) {
        if (d <= milliseconds::zero()) {
            throw error(errc::invalid_argument,
                        std::string("client_options.") + field + " must be > 0, got " + ms_text(d));
        }
    };
    positive(options_.connect_timeout, "connect_timeout");
    positive(options_.command_timeout, "command_timeout");
    if (options_.session_ttl < std::chrono::seconds(2) ||
        options_.session_ttl > std::chrono::hours(24 * 365)) {
        throw error(errc::invalid_argument,
                    "client_options.session_ttl must be in [2s, 365d], got " +
                        ms_text(options_.session_ttl));
    }
    std::error_code ec;
    endpoint_ = parse_etcd_url(options_.url, ec);
    dlock::detail::throw_if(ec);
    apply_tls_options(endpoint_, options_.tls, ec);
    dlock::detail::throw_if(ec);
    grpc::ChannelArguments args;
    const auto creds = credentials_for(endpoint_, args);
    // Reconnect quickly after a member comes back (gRPC's default backoff starts at 1 s and grows
    // to 2 minutes, longer than a lease). The "minimum reconnect backoff" is not a backoff: gRPC
    // gives each connection attempt (TCP and HTTP/2 handshake) at least that long. At 100 ms a
    // member slow to answer a new connection (a loaded machine) was never reached, every attempt
    // cut short; min_connect_attempt leaves it time and still retries a silent address soon.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(min_connect_attempt.count()));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    for (const auto& host : endpoint_.hosts) {
        auto s = std::make_shared<stubs>();
        s->host = host;
        s->channel = grpc::CreateCustomChannel(channel_target(host), creds, args);
        s->kv = pb::KV::NewStub(s->channel);
        s->watch = pb::Watch::NewStub(s->channel);
        s->lease = pb::Lease::NewStub(s->channel);
        s->auth = pb::Auth::NewStub(s->channel);
        endpoints_.push_back(std::move(s));
    }
}

engine::~engine() { stop(); }

void engine::start() {
    worker_.start([this](std::stop_token st) { run(st); });
}

void engine::stop() noexcept {
    // A forked child's copy: the background thread and gRPC's run only in the parent, and
    // revoking the lease would end the parent's locks. Keep everything until the child exits.
    if (dlock::detail::kept_in_forked_child(*this, [this] { keep_after_fork(); })) return;
    worker_.stop([this] { wake(); });
    close_stream();
    std::vector<std::shared_ptr<lease_core>> orphaned;
    std::shared_ptr<session> s;
    {
        dlock::detail::lock_guard lock(mutex_);
        stopped_ = true;
        for (auto& [ptr, held] : registry_) {
            if (auto l = held.lease.lock()) orphaned.push_back(std::move(l));
        }
        registry_.clear();
        cancel_waits(nullptr);
        s = std::move(session_);
        if (s) s->dead = true;
    }
    turn_cv_.notify_all();
    end_watches();  // a wait that ends from now on finishes its own watch (stopped_)
    for (auto& l : orphaned) l->lose(make_error_code(errc::lock_lost), lost_reason::client_closed);
    if (s) {
        // The keys go with the lease; if the revoke is not answered they go when it expires.
        try {
            pb::LeaseRevokeRequest req;
            req.set_id(s->id);
            pb::LeaseRevokeResponse resp;
            rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
                [&](stubs& e, grpc::ClientContext& ctx) {
                    return e.lease->LeaseRevoke(&ctx, req, &resp);
                });
        } catch (...) {
        }
    }
}

// Not under mutex_: another thread of the parent may have held it at the fork.
void engine::keep_after_fork() noexcept DLOCK_NO_THREAD_SAFETY_ANALYSIS {
    worker_.abandon();
    for (auto& e : endpoints_) dlock::detail::keep_forever(e);
    if (session_) dlock::detail::keep_forever(session_);
    for (auto& w : ending_)
        dlock::detail::keep_forever(std::shared_ptr<ending_watch>(std::move(w)));
    if (stream_)
        dlock::detail::keep_forever(std::shared_ptr<keep_alive_stream>(std::move(stream_)));
}

void engine::wake() noexcept {
    {
        dlock::detail::lock_guard lock(mutex_);
        wake_ = true;
    }
    worker_cv_.notify_all();
}

void engine::report_error(std::error_code ec, std::string_view what) noexcept {
    dlock::detail::report_to(options_.error_handler, ec, what);
}

void engine::notify(const lock_event& event) noexcept {
    dlock::detail::notify_observer(options_.observer, options_.error_handler, event);
}

std::string engine::key_prefix(std::string_view name) const {
    return detail::key_prefix(endpoint_, name);
}

void engine::cancel_waits(const session* s) noexcept {
    for (auto& [ctx, owner] : waits_) {
        if (s == nullptr || owner == s) ctx->TryCancel();
    }
}

/// etcd's answer to a request whose token expired or was dropped (auth disabled and enabled
/// again, a restart with simple tokens): authenticate again, once.
bool invalid_token(const grpc::Status& st) {
    return st.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
           st.error_message().find("invalid auth token") != std::string::npos;
}

grpc::Status engine::auth_token(stubs& e, steady::time_point deadline, const std::string& stale,
                                std::string& token) {
    token.clear();
    if (endpoint_.user.empty()) return grpc::Status::OK;
    dlock::detail::lock_guard lock(auth_mutex_);
    if (!token_.empty() && token_ != stale) {
        token = token_;
        return grpc::Status::OK;
    }
    token_.clear();
    pb::AuthenticateRequest req;
    req.set_name(endpoint_.user);
    req.set_password(endpoint_.password);
    pb::AuthenticateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(wall(std::min(
        deadline, dlock::detail::deadline_after(steady::now(), options_.command_timeout))));
    auto st = e.auth->Authenticate(&ctx, req, &resp);
    if (!st.ok()) {
        if (retriable(st)) return st;
        // etcd says "authentication failed, invalid user ID or password" (or that auth is not
        // enabled): its text never holds the password.
        return {grpc::StatusCode::UNAUTHENTICATED,
                "authentication as user \"" + endpoint_.user + "\" failed: " + st.error_message()};
    }
    token_ = resp.token();
    token = token_;
    return grpc::Status::OK;
}

void engine::add_token(grpc::ClientContext& ctx) {
    if (endpoint_.user.empty()) return;
    dlock::detail::lock_guard lock(auth_mutex_);
    if (!token_.empty()) ctx.AddMetadata("token", token_);
}

grpc::Status engine::rpc(steady::time_point deadline,
                         const std::function<grpc::Status(stubs&, grpc::ClientContext&)>& call,
                         const stubs** answered) {
    grpc::Status st;
    std::string stale;  // a token etcd refused (once per call)
    for (int tries = 0;; ++tries) {
        const auto now = steady::now();
        const auto index = current_.load() % endpoints_.size();
        auto& e = *endpoints_[index];
        if (answered != nullptr) *answered = &e;
        std::string token;
        st = auth_token(e, deadline, stale, token);
        if (st.ok()) {
            grpc::ClientContext ctx;
            ctx.set_deadline(wall(
                std::min(deadline, dlock::detail::deadline_after(now, options_.command_timeout))));
            if (!token.empty()) ctx.AddMetadata("token", token);
            st = call(e, ctx);
            if (invalid_token(st) && stale.empty() && !token.empty()) {
                stale = token;  // authenticate again, once
                continue;
            }
        }
        if (st.ok() || !retriable(st)) return st;
        // Next member (once per failure: another thread may have moved on already).
        auto expected = index;
        current_.compare_exchange_strong(expected, (index + 1) % endpoints_.size());
        if (steady::now() >= deadline) return st;
        // A whole round of members failed: pause briefly before the next round.
        if (tries > 0 && (tries + 1) % static_cast<int>(endpoints_.size()) == 0) {
            std::this_thread::sleep_for(
                std::min<steady::duration>(milliseconds(50), deadline - steady::now()));
        }
    }
}

std::shared_ptr<session> engine::session_for(std::error_code& ec) {
    dlock::detail::lock_guard connecting(connect_mutex_);
    {
        dlock::detail::lock_guard lock(mutex_);
        if (stopped_) {
            fail(ec, errc::lock_lost, "the etcd client was closed");
            return nullptr;
        }
        if (session_ && !session_->dead && steady::now() < session_->valid_until) return session_;
        if (session_) {
            session_->dead = true;  // expired unconfirmed: it is not used again
            cancel_waits(session_.get());
        }
    }
    pb::LeaseGrantRequest req;
    req.set_ttl(std::chrono::ceil<std::chrono::seconds>(options_.session_ttl).count());
    pb::LeaseGrantResponse resp;
    const auto sent = steady::now();
    const stubs* answered = endpoints_.front().get();
    const auto st = rpc(
        dlock::detail::deadline_after(sent, options_.connect_timeout),
        [&](stubs& e, grpc::ClientContext& ctx) { return e.lease->LeaseGrant(&ctx, req, &resp); },
        &answered);
    if (!st.ok() || !resp.error().empty() || resp.ttl() <= 0) {
        const auto code = st.ok() ? errc::server_error : code_for(st);
        const auto& host = answered->host;  // rpc() has moved on to the next member by now
        std::string why = st.ok() ? resp.error() : status_text(st);
        if (endpoint_.secure && code == errc::connection_failed) {
            // gRPC does not say why a TLS handshake failed: find out with one of our own
            // (bounded: a member out of reach has no TLS problem to report).
            const auto problem = tls_problem(
                host, endpoint_.tls, std::min<milliseconds>(options_.connect_timeout, 1000ms));
            if (!problem.empty()) why = "TLS: " + problem + " (gRPC: " + why + ")";
        }
        fail(ec, code, "etcd " + host + ": lease grant failed: " + why);
        return nullptr;
    }
    auto s = std::make_shared<session>();
    s->id = resp.id();
    s->ttl = std::chrono::seconds(resp.ttl());
    {
        dlock::detail::lock_guard lock(mutex_);
        s->valid_until = dlock::detail::valid_until(sent, s->ttl);
        s->next_keep_alive = sent + s->ttl / 3;
        session_ = s;
        wake_ = true;
    }
    worker_cv_.notify_all();
    return s;
}

bool engine::take_turn(const std::string& prefix, std::uint64_t& ticket) {
    dlock::detail::lock_guard lock(mutex_);
    auto& line = turns_[prefix];
    if (ticket == 0) {
        ticket = ++last_turn_;
        if (line.owner == 0 && line.waiting.empty()) {
            line.owner = ticket;
            return true;
        }
        line.waiting.push_back(ticket);
        return false;
    }
    if (line.owner != 0) return false;
    if (!line.waiting.empty()) {
        if (line.waiting.front() != ticket) return false;
        line.waiting.pop_front();
    }
    line.owner = ticket;
    return true;
}

void engine::leave_turn(const std::string& prefix, std::uint64_t turn) noexcept {
    if (turn == 0) return;
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = turns_.find(prefix);
        if (it == turns_.end() || it->second.owner != turn) return;
        it->second.owner = 0;
        if (it->second.waiting.empty()) turns_.erase(it);
    }
    turn_cv_.notify_all();
}

void engine::drop_ticket(const std::string& prefix, std::uint64_t ticket) noexcept {
    if (ticket == 0) return;
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = turns_.find(prefix);
        if (it == turns_.end()) return;
        auto& w = it->second.waiting;
        w.erase(std::remove(w.begin(), w.end(), ticket), w.end());
        if (it->second.owner == 0 && w.empty()) turns_.erase(it);
    }
    turn_cv_.notify_all();
}

std::size_t engine::waiting_here(std::string_view name) {
    const auto prefix = key_prefix(name);
    dlock::detail::lock_guard lock(mutex_);
    const auto it = turns_.find(prefix);
    return it == turns_.end() ? 0 : it->second.waiting.size();
}

dlock::lease engine::acquire_until(std::string_view name, const lock_request& request,
                                   const lock_options& options, steady::time_point deadline,
                                   std::error_code& ec) noexcept {
    ec.clear();
    const dlock::detail::acquire_call call(*this, name, ec);  // since/waited, gave_up
    return dlock::detail::guarded(ec, [&]() -> dlock::lease {
        if (!dlock::detail::check_acquire(name, max_name_length, request, options, ec)) return {};
        if (request.reenter != nullptr) return reenter(name, request, options, ec);
        using dlock::detail::acquire_step;
        dlock::detail::acquire_policy policy(
            options, deadline, dlock::detail::acquire_policy::notification::watch_with_read);
        const bool permits = request.kind == lock_kind::permits;
        attempt_state a{
            name, key_prefix(name),
            std::string(permits ? "semaphore \"" : "lock \"") + std::string(name) + "\"", options,
            deadline};
        a.kind = request.kind;
        a.count = request.count;
        a.limit = request.limit;
        if (!key_per_lease(a.kind)) a.guid = dlock::detail::random_token();
        if (permits) a.limit_key = permits_key(endpoint_, name);
        // Whatever happens, our key and the local turn do not stay behind a failed call.
        const auto clean_up = [&] {
            if (!a.key.empty() && a.s) {
                bool was_there = false;
                const auto by =
                    dlock::detail::deadline_after(steady::now(), options_.command_timeout);
                if (!delete_fenced(a.key, a.revision, *a.s, by, was_there, a.prefix, a.limit_key)) {
                    dlock::detail::lock_guard lock(mutex_);
                    pending_.push_back({a.s, a.prefix, a.turn, a.key, a.revision, a.limit_key});
                    wake_ = true;
                    a.turn = 0;  // the background thread gives it back once deleted
                }
            }
            if (a.turn != 0) {
                leave_turn(a.prefix, std::exchange(a.turn, 0));
            } else {
                drop_ticket(a.prefix, a.ticket);  // waiting in line, or never queued
            }
        };
        for (auto step = policy.start();;) {
            if (step.event == event_kind::wait_started)
                notify({event_kind::wait_started, name, 0, {}, steady::now()});
            switch (step.what) {
                case acquire_step::action::attempt:
                case acquire_step::action::subscribe: {
                    const auto report = attempt(a);
                    step = policy.next(steady::now(), report);
                    break;
                }
                case acquire_step::action::wait: {
                    wait_turn(a, step.until);
                    step = policy.woke();
                    break;
                }
                case acquire_step::action::done: {
                    if (a.where.wake_successor) wake_successor(a);
                    auto held = held_key{};
                    held.owner = a.s;
                    held.prefix = a.prefix;
                    held.turn = std::exchange(a.turn, 0);
                    held.key = a.key;
                    held.revision = a.revision;
                    held.limit_key = a.limit_key;
                    const auto cap = options.renew ? options.max_hold
                                                   : std::min(options.max_hold, options.lease);
                    if (cap != forever) held.cap_valid = dlock::detail::valid_until(a.sent, cap);
                    std::shared_ptr<lease_core> core;
                    {
                        dlock::detail::lock_guard lock(mutex_);
                        const auto valid = std::min(a.s->valid_until, held.cap_valid);
                        core = std::make_shared<lease_core>(shared_from_this(), std::string(name),
                                                            a.key,
                                                            static_cast<std::uint64_t>(a.revision),
                                                            options, a.sent, valid, request.kind);
                        held.lease = core;
                        registry_[core.get()] = std::move(held);
                        wake_ = true;
                    }
                    worker_cv_.notify_all();
                    notify({event_kind::acquired,
                            name,
                            static_cast<std::uint64_t>(a.revision),
                            {},
                            steady::now()});
                    return dlock::detail::lease_access::make(std::move(core));
                }
                case acquire_step::action::give_up: {
                    clean_up();
                    std::string message = std::move(a.failure);
                    if (message.empty() && !permits) {
                        message = policy.give_up_message(step, a.quoted);
                    } else if (message.empty() && step.error == errc::canceled) {
                        message = "waiting for " + a.quoted + " was canceled";
                    } else if (message.empty() && step.error == errc::attempts_exhausted) {
                        message = a.quoted + " still full after " +
                                  std::to_string(policy.attempts()) + " attempts";
                    } else if (message.empty()) {
                        message = a.quoted + " has no permits free";
                    }
                    fail(ec, step.error, std::move(message));
                    if (step.event == event_kind::error)
                        notify({event_kind::error, name, 0, ec, steady::now()});
                    return {};
                }
            }
        }
    });
}

dlock::lease engine::reenter(std::string_view name, const lock_request& request,
                             const lock_options& options, std::error_code& ec) {
    auto* previous = dlock::detail::lease_access::core(*request.reenter);
    if (previous == nullptr) {
        dlock::detail::refuse_reentry(name, "an empty lease", ec);
        return {};
    }
    std::shared_ptr<lease_core> core;
    std::int64_t revision = 0;
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = registry_.find(previous);
        // Only a re-entrant grant re-enters: a plain mutex's lease of the same name is not an
        // owner's level (one name serves one kind).
        if (it == registry_.end() || previous->name() != name ||
            previous->kind() != lock_kind::reentrant) {
            dlock::detail::refuse_reentry(
                name, "the lease is not a live reentrant grant of this lock on this client", ec);
            return {};
        }
        if (it->second.owner->dead || previous->state(steady::now()) == lock_state::lost) {
            fail(ec, errc::lock_lost,
                 "re-entering lock \"" + std::string(name) + "\": the grant was lost");
            return {};
        }
        // One more level of the same key: released last, the key goes (engine::release).
        auto level = it->second;
        revision = level.revision;
        core = std::make_shared<lease_core>(
            shared_from_this(), std::string(name), level.key, static_cast<std::uint64_t>(revision),
            options, steady::now(), previous->valid_until(), lock_kind::reentrant);
        level.lease = core;
        registry_[core.get()] = std::move(level);
    }
    notify({event_kind::acquired, name, static_cast<std::uint64_t>(revision), {}, steady::now()});
    return dlock::detail::lease_access::make(std::move(core));
}

grpc::Status engine::read_queue(const std::string& prefix, const std::string& limit_key,
                                std::vector<dlock::detail::queue_entry>& entries,
                                std::optional<std::string>& limit, std::int64_t& revision) {
    pb::TxnRequest txn;
    range_queue(*txn.add_success()->mutable_request_range(), prefix);
    txn.add_success()->mutable_request_range()->set_key(limit_key);
    pb::TxnResponse resp;
    auto st = rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
                  [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
    if (!st.ok()) return st;
    if (resp.responses_size() != 2)
        return {grpc::StatusCode::INTERNAL, "etcd: bad Txn reply (" + limit_key + ")"};
    entries = entries_in(resp.responses(0).response_range(), prefix);
    const auto& l = resp.responses(1).response_range();
    limit.reset();
    if (l.kvs_size() == 1) limit = l.kvs(0).value();
    revision = resp.header().revision();
    return st;
}

bool engine::read_permits(attempt_state& a) {
    for (int round = 0; round < 3; ++round) {
        // Put the number asked for unless one is set, else read it: one Txn.
        pb::TxnRequest txn;
        compare_create(*txn.add_compare(), a.limit_key, 0);
        auto* put = txn.add_success()->mutable_request_put();
        put->set_key(a.limit_key);
        put->set_value(std::to_string(a.limit));
        txn.add_failure()->mutable_request_range()->set_key(a.limit_key);
        pb::TxnResponse resp;
        const auto st =
            rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
                [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
        if (!st.ok()) {
            a.failure = "etcd: " + a.quoted + ": reading its permits: " + status_text(st);
            a.permits = 0;
            return false;
        }
        if (resp.succeeded()) {
            a.permits = a.limit;
            return true;
        }
        const auto& got = resp.responses(0).response_range();
        if (got.kvs_size() == 0) continue;  // deleted meanwhile (by hand): put it again
        const auto n = parse_permits(got.kvs(0).value());
        if (!n) {
            a.failure = "etcd: " + a.quoted + ": " + a.limit_key +
                        " does not hold a number of permits (1 to 4294967295)";
            a.permits = 0;
            return false;
        }
        a.permits = *n;
        return true;
    }
    a.failure = "etcd: " + a.quoted + ": " + a.limit_key + " keeps vanishing";
    return false;
}

dlock::detail::attempt_report engine::attempt(attempt_state& a) {
    using dlock::detail::attempt_report;
    const auto failed = [&](errc code, std::string message) {
        a.failure = std::move(message);
        return attempt_report::failed(make_error_code(code));
    };
    a.local_wait = false;
    if (a.turn == 0 && key_per_lease(a.kind)) {
        if (!take_turn(a.prefix, a.ticket)) {
            a.local_wait = true;  // another call of this client has this lock's key
            return attempt_report::contended();
        }
        a.turn = a.ticket;
    }
    const bool permits = a.kind == lock_kind::permits;
    for (int round = 0;; ++round) {
        if (a.options.cancel.stop_requested())
            return failed(errc::canceled, "waiting for " + a.quoted + " was canceled");
        bool dead = false;
        if (a.s) {
            dlock::detail::lock_guard lock(mutex_);
            dead = a.s->dead || steady::now() >= a.s->valid_until;
        }
        if (!a.s || dead) {
            // A session that expired took our key with it: queue again under a new one.
            a.key.clear();
            a.revision = 0;
            std::error_code sec;
            a.s = session_for(sec);
            if (!a.s) {
                a.failure = dlock::detail::message_for(sec);
                return attempt_report::failed(sec);
            }
        }
        if (permits && a.permits == 0) {
            // The first attempt sets the number of permits if none is set (later ones read it
            // in their Txn).
            if (!read_permits(a)) return failed(errc::unexpected_reply, std::move(a.failure));
            if (a.permits != a.limit && !a.permits_reported) {
                a.permits_reported = true;
                report_error(make_error_code(errc::invalid_argument),
                             dlock::detail::permits_mismatch(a.quoted, a.permits, a.limit));
            }
        }
        const auto key = entry_key(a.prefix, a.s->id, a.kind, a.count, a.guid);
        if (round == 0 && a.revision != 0 && a.key == key) {
            if (auto decided = look_again(a)) return *decided;
        }
        // concurrency.Mutex's tryAcquire: put our key unless it exists, and read the queue under
        // the prefix (every key, by create revision) in the same transaction.
        pb::TxnRequest txn;
        compare_create(*txn.add_compare(), key, 0);
        auto* put = txn.add_success()->mutable_request_put();
        put->set_key(key);
        put->set_lease(a.s->id);
        range_queue(*txn.add_success()->mutable_request_range(), a.prefix);
        txn.add_failure()->mutable_request_range()->set_key(key);
        range_queue(*txn.add_failure()->mutable_request_range(), a.prefix);
        if (permits) {
            // The number of permits in the same snapshot as the queue: a grant is decided on the
            // number that was set when its queue was read.
            txn.add_success()->mutable_request_range()->set_key(a.limit_key);
            txn.add_failure()->mutable_request_range()->set_key(a.limit_key);
        }
        pb::TxnResponse resp;
        a.sent = steady::now();
        a.key = key;  // from here a put may have landed: clean-up looks for it
        // An attempt runs to its end even past the acquire's deadline (a past deadline means one
        // attempt). Members that do not answer are tried in turn, but not forever: a cluster out
        // of reach fails the acquire (connection_failed) after connect_timeout + command_timeout.
        const auto bound = dlock::detail::deadline_after(
            a.sent, options_.connect_timeout + options_.command_timeout);
        const stubs* answered = endpoints_.front().get();
        const auto st = rpc(
            bound, [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); },
            &answered);
        if (!st.ok()) {
            if (lease_gone(st)) {
                dlock::detail::lock_guard lock(mutex_);
                a.s->dead = true;
                cancel_waits(a.s.get());
                continue;
            }
            return failed(code_for(st), "etcd " + answered->host + ": acquiring " + a.quoted +
                                            ": " + status_text(st));
        }
        if (resp.responses_size() != (permits ? 3 : 2))
            return failed(errc::unexpected_reply, "etcd: bad Txn reply");
        if (permits) {
            const auto& got = resp.responses(2).response_range();
            const auto n = got.kvs_size() == 1 ? parse_permits(got.kvs(0).value()) : std::nullopt;
            if (!n) {
                // Deleted or overwritten by hand since the first attempt: set it (or refuse
                // what is there) as the first attempt does.
                a.permits = 0;
                if (round > 3) return failed(errc::unexpected_reply, "etcd: " + a.limit_key);
                continue;
            }
            a.permits = *n;
        }
        if (resp.succeeded()) {
            a.revision = resp.header().revision();
        } else {
            const auto& mine = resp.responses(0).response_range();
            if (mine.kvs_size() == 0) {
                if (round > 3) return failed(errc::unexpected_reply, "etcd: our key vanished");
                continue;
            }
            if (mine.kvs(0).lease() != a.s->id) {
                return failed(errc::unexpected_reply,
                              "etcd: " + a.quoted + ": key " + key +
                                  " exists without this client's lease (written by someone else)");
            }
            a.revision = mine.kvs(0).create_revision();
        }
        a.seen = resp.header().revision();
        const auto entries = entries_in(resp.responses(1).response_range(), a.prefix);
        a.where = locate(a.kind, entries, key, a.permits);
        if (a.where.clash) {
            return failed(errc::unexpected_reply, a.quoted + " is used as a " + other_kind(a.kind) +
                                                      "; a name serves one kind");
        }
        if (!a.where.found) {  // deleted between the put and the read: look again
            if (round > 3) return failed(errc::unexpected_reply, "etcd: our key vanished");
            continue;
        }
        return a.where.holds ? attempt_report::granted() : attempt_report::contended();
    }
}

std::optional<dlock::detail::attempt_report> engine::look_again(attempt_state& a) {
    using dlock::detail::attempt_report;
    const bool permits = a.kind == lock_kind::permits;
    // A read-only Txn: etcd serves it as a linearizable read (no Raft proposal), where the put's
    // Txn below is a write even when its compare fails and it only reads.
    pb::TxnRequest txn;
    range_queue(*txn.add_success()->mutable_request_range(), a.prefix);
    if (permits) txn.add_success()->mutable_request_range()->set_key(a.limit_key);
    pb::TxnResponse resp;
    a.sent = steady::now();
    const auto bound =
        dlock::detail::deadline_after(a.sent, options_.connect_timeout + options_.command_timeout);
    const stubs* answered = endpoints_.front().get();
    const auto st = rpc(
        bound, [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); },
        &answered);
    if (!st.ok()) {
        a.failure = "etcd " + answered->host + ": acquiring " + a.quoted + ": " + status_text(st);
        return attempt_report::failed(make_error_code(code_for(st)));
    }
    if (resp.responses_size() != (permits ? 2 : 1)) return std::nullopt;
    const auto& queue = resp.responses(0).response_range();
    // Our key, with the create revision it was put with and our lease: a key of that name put
    // again (a new create revision) or by someone else (another lease) is not our place in line.
    const auto mine = std::find_if(queue.kvs().begin(), queue.kvs().end(),
                                   [&](const auto& kv) { return kv.key() == a.key; });
    if (mine == queue.kvs().end() || mine->create_revision() != a.revision ||
        mine->lease() != a.s->id) {
        return std::nullopt;
    }
    if (permits) {
        const auto& got = resp.responses(1).response_range();
        const auto n = got.kvs_size() == 1 ? parse_permits(got.kvs(0).value()) : std::nullopt;
        if (!n) return std::nullopt;
        a.permits = *n;
    }
    a.seen = resp.header().revision();
    a.where = locate(a.kind, entries_in(queue, a.prefix), a.key, a.permits);
    if (a.where.clash) {
        a.failure = a.quoted + " is used as a " + other_kind(a.kind) + "; a name serves one kind";
        return attempt_report::failed(make_error_code(errc::unexpected_reply));
    }
    if (!a.where.found) return std::nullopt;
    return a.where.holds ? attempt_report::granted() : attempt_report::contended();
}

void engine::wake_successor(const attempt_state& a) {
    // Same key, same lease, create revision unchanged (the fencing token stays): only the waiter
    // watching our key sees the put. Best effort: if it is lost, that waiter looks again when
    // our key is deleted (release, or the end of our etcd lease).
    pb::TxnRequest txn;
    compare_create(*txn.add_compare(), a.key, a.revision);
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(a.key);
    put->set_lease(a.s->id);
    pb::TxnResponse resp;
    const auto st =
        rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
            [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
    if (!st.ok()) {
        report_error(make_error_code(code_for(st)),
                     "etcd: " + a.quoted + ": telling the next waiter to look again: " +
                         status_text(st) + " (it looks again at our release)");
    }
}

void engine::wait_turn(attempt_state& a, steady::time_point until) {
    if (a.local_wait) {
        dlock::detail::unique_lock lock(mutex_);
        turn_cv_.wait_until(lock, a.options.cancel, until, [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS {
            const auto it = turns_.find(a.prefix);
            return stopped_ || it == turns_.end() ||
                   (it->second.owner == 0 && !it->second.waiting.empty() &&
                    it->second.waiting.front() == a.ticket);
        });
        return;
    }
    // Never past the session's validity: a waiter whose session expired must not wait on (its
    // key is gone); the next attempt queues it again under a new session.
    steady::time_point bound;
    {
        dlock::detail::lock_guard lock(mutex_);
        bound = std::min(until, a.s->valid_until);
    }
    auto call = std::make_unique<ending_watch>(*this);
    auto& ctx = call->ctx;
    ctx.set_deadline(wall(bound));
    add_token(ctx);
    {
        dlock::detail::lock_guard lock(mutex_);
        if (stopped_ || a.s->dead) return;
        waits_[&ctx] = a.s.get();
    }
    std::optional<std::stop_callback<std::function<void()>>> on_cancel;
    on_cancel.emplace(a.options.cancel, [&ctx] { ctx.TryCancel(); });
    auto& e = *endpoints_[current_.load() % endpoints_.size()];
    call->stream = e.watch->Watch(&ctx);
    auto& stream = call->stream;
    // Only what decides our turn is watched (no herd): the key we queue behind, deleted (a
    // semaphore's also put: it holds now, so we may be first in line); or, first in a semaphore's
    // line, every deletion under the prefix and a new number of permits. Nothing since our read
    // may be missed:
    // - The key we queue behind is watched from now: etcd serves a watch that starts at or below
    //   its current revision from a loop that runs every 100 ms, and under contention another
    //   waiter's write often lands between our read and the watch. What changed in between,
    //   the key itself says (watch_changed_meanwhile).
    // - The first semaphore waiter's watches start right after our read's revision (a deletion
    //   under the prefix leaves nothing to read back).
    std::vector<pb::WatchRequest> watches(1);
    auto* create = watches[0].mutable_create_request();
    if (a.where.watch_all) {
        create->set_start_revision(a.seen + 1);
        create->set_key(a.prefix);
        create->set_range_end(prefix_range_end(a.prefix));
        create->add_filters(pb::WatchCreateRequest_FilterType_NOPUT);
        auto* limit = watches.emplace_back().mutable_create_request();
        limit->set_key(a.limit_key);
        limit->set_start_revision(a.seen + 1);
    } else {
        create->set_key(a.where.watch);
        if (a.kind != lock_kind::permits)
            create->add_filters(pb::WatchCreateRequest_FilterType_NOPUT);
    }
    bool written = true;
    for (const auto& w : watches) written = written && stream->Write(w);
    if (written) {
        pb::WatchResponse resp;
        while (stream->Read(&resp)) {
            if (resp.canceled() || resp.compact_revision() != 0 || resp.events_size() > 0) break;
            if (resp.created() && !a.where.watch_all &&
                watch_changed_meanwhile(a, resp.header().revision(), bound))
                break;
        }
    }
    // Done with: the background thread cancels and finishes it (end_watches). The cancel callback
    // goes first: that thread may destroy the call's context as soon as it has it.
    on_cancel.reset();
    {
        dlock::detail::lock_guard lock(mutex_);
        if (!stopped_) {
            ending_.push_back(std::move(call));
            wake_ = true;
        }
    }
    worker_cv_.notify_all();
}

bool engine::watch_changed_meanwhile(const attempt_state& a, std::int64_t created,
                                     steady::time_point bound) {
    // The watch reports changes after `created` (at most the store's revision when it was made);
    // nothing happened after our read if that is our read's revision.
    if (created <= a.seen) return false;
    // Read after the watch was made: a change up to the read shows here, one after `created`
    // in the watch (both, in between).
    pb::RangeRequest r;
    r.set_key(a.where.watch);
    pb::RangeResponse got;
    const auto st =
        rpc(std::min(bound, dlock::detail::deadline_after(steady::now(), options_.command_timeout)),
            [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Range(&ctx, r, &got); });
    return !st.ok() || got.kvs_size() == 0 || got.kvs(0).mod_revision() > a.seen;
}

void engine::end_watches() {
    std::vector<std::unique_ptr<ending_watch>> done;
    {
        dlock::detail::lock_guard lock(mutex_);
        done.swap(ending_);
    }
}

bool engine::delete_fenced(const std::string& key, std::int64_t revision, const session& owner,
                           steady::time_point deadline, bool& was_there, const std::string& prefix,
                           const std::string& limit_key) {
    was_there = false;
    if (revision == 0) {
        // A put whose reply was lost: the key is ours if it carries our lease.
        pb::RangeRequest r;
        r.set_key(key);
        pb::RangeResponse got;
        const auto st = rpc(deadline, [&](stubs& e, grpc::ClientContext& ctx) {
            return e.kv->Range(&ctx, r, &got);
        });
        if (!st.ok()) return false;
        if (got.kvs_size() == 0 || got.kvs(0).lease() != owner.id) return true;
        revision = got.kvs(0).create_revision();
    }
    // Fenced on the create revision: a retried delete never removes a newer key of ours.
    pb::TxnRequest txn;
    compare_create(*txn.add_compare(), key, revision);
    auto* del = txn.add_success()->mutable_request_delete_range();
    del->set_key(key);
    const bool with_limit = !limit_key.empty();
    if (with_limit) {
        // Ours is the last key under the prefix when every key there has our create revision
        // (a compare over a range holds for each key in it). Then the permits key goes too;
        // else (failure) only our key, fenced as above, in a nested Txn.
        auto& last = *txn.add_compare();
        compare_create(last, prefix, revision);
        last.set_range_end(prefix_range_end(prefix));
        txn.add_success()->mutable_request_delete_range()->set_key(limit_key);
        auto& ours = *txn.add_failure()->mutable_request_txn();
        compare_create(*ours.add_compare(), key, revision);
        ours.add_success()->mutable_request_delete_range()->set_key(key);
    }
    pb::TxnResponse resp;
    const auto st = rpc(
        deadline, [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
    if (!st.ok()) return false;
    was_there = resp.succeeded() || (with_limit && resp.responses_size() == 1 &&
                                     resp.responses(0).response_txn().succeeded());
    return true;
}

std::string engine::record_key(std::string_view name) const {
    // "<prefix>/dlock-record-<name in hex>": its only '/' comes right after the prefix, so no
    // lock's key range ("<prefix><lock name>/...", a lock name is never empty) contains it.
    static constexpr char hex[] = "0123456789abcdef";
    std::string key = endpoint_.prefix + "/dlock-record-";
    for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        key += hex[c >> 4];
        key += hex[c & 15];
    }
    return key;
}

std::string engine::record_once(std::string_view name, std::string_view value,
                                std::error_code& ec) noexcept {
    ec.clear();
    return dlock::detail::guarded(ec, [&]() -> std::string {
        const auto quoted = "record_once(\"" + std::string(name) + "\")";
        dlock::detail::validate_record(name, value, max_name_length, quoted, ec);
        if (ec) return {};
        const auto key = record_key(name);
        // Put unless it exists, else read it: one Txn, so of two first users one writes and the
        // other reads what it wrote. No lease: a record outlives the client.
        pb::TxnRequest txn;
        compare_create(*txn.add_compare(), key, 0);
        auto* put = txn.add_success()->mutable_request_put();
        put->set_key(key);
        put->set_value(std::string(value));
        txn.add_failure()->mutable_request_range()->set_key(key);
        pb::TxnResponse resp;
        const auto st =
            rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
                [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
        if (!st.ok()) {
            fail(ec, code_for(st), "etcd: " + quoted + ": " + status_text(st));
            return {};
        }
        if (resp.succeeded()) return std::string(value);
        if (resp.responses_size() != 1 || resp.responses(0).response_range().kvs_size() != 1) {
            fail(ec, errc::unexpected_reply, "etcd: " + quoted + ": the record vanished; retry");
            return {};
        }
        const auto& stored = resp.responses(0).response_range().kvs(0).value();
        if (stored.empty() || stored.size() > max_record_size) {
            fail(ec, errc::unexpected_reply,
                 "etcd: " + quoted + ": " + key + " holds " + std::to_string(stored.size()) +
                     " bytes, not a record of 1 to " + std::to_string(max_record_size));
            return {};
        }
        return stored;
    });
}

lock_info engine::inspect(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    return dlock::detail::guarded(ec, [&]() -> lock_info {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return {};
        std::vector<dlock::detail::queue_entry> entries;
        std::optional<std::string> limit_text;
        std::int64_t revision = 0;
        const auto st = read_queue(key_prefix(name), permits_key(endpoint_, name), entries,
                                   limit_text, revision);
        if (!st.ok()) {
            fail(ec, code_for(st),
                 "inspect \"" + std::string(name) + "\": etcd: " + status_text(st));
            return {};
        }
        lock_info out;
        out.name = std::string(name);
        const auto limit = limit_text ? parse_permits(*limit_text) : std::nullopt;
        const auto view = dlock::detail::view_queue(entries, limit.value_or(0));
        // The holders' fencing tokens are their keys' create revisions: the largest is the latest.
        for (const auto& e : entries) {
            if (std::find(view.holding.begin(), view.holding.end(), e.id) != view.holding.end())
                out.fencing_counter =
                    std::max(out.fencing_counter.value_or(0), static_cast<std::uint64_t>(e.order));
        }
        if (view.permit_holders + view.permit_waiters > 0 ||
            (limit && view.readers + view.lock_waiters == 0 && !view.writer)) {
            out.type = lock_type::counting_semaphore;
            if (limit) out.permit_limit = *limit;
            out.holders = view.permit_holders;
            out.permits_in_use = static_cast<std::uint32_t>(view.permits_in_use);
            out.waiters = view.permit_waiters;
        } else if (view.any_read) {
            out.type = lock_type::shared_mutex;
            out.readers = view.readers;
            out.writer = view.writer;
            out.holders = view.writer ? 1 : view.readers;
            out.waiters = view.lock_waiters;
        } else if (view.writer || view.lock_waiters > 0) {
            // etcdctl lock's key, and every exclusive kind's: the same key (docs/etcd.md).
            out.type = lock_type::exclusive;
            out.holders = view.writer ? 1 : 0;
            out.depth = view.writer ? 1 : 0;
            out.waiters = view.lock_waiters;
        }
        out.held = out.holders > 0;
        return out;
    });
}

/// backend::watch on etcd: one Watch stream per wait, on the lock's key range and its permits
/// key, from the revision after the last one seen, so no change between two waits is missed.
class etcd_watch final : public dlock::lock_watch {
public:
    etcd_watch(engine& e, std::string name) : engine_(e), name_(std::move(name)) {
        prefix_ = engine_.key_prefix(name_);
        limit_key_ = permits_key(engine_.endpoint_, name_);
    }

    /// The store's revision now: later waits report changes after it.
    bool start(std::error_code& ec) {
        std::vector<dlock::detail::queue_entry> entries;
        std::optional<std::string> limit;
        const auto st = engine_.read_queue(prefix_, limit_key_, entries, limit, seen_);
        if (!st.ok()) {
            fail(ec, code_for(st), "watch \"" + name_ + "\": etcd: " + status_text(st));
            return false;
        }
        return true;
    }

    bool wait_until(steady::time_point deadline, std::error_code& ec) noexcept override {
        ec.clear();
        try {
            grpc::ClientContext ctx;
            ctx.set_deadline(wall(deadline));
            auto& e = *engine_.endpoints_[engine_.current_.load() % engine_.endpoints_.size()];
            auto stream = e.watch->Watch(&ctx);
            bool written = true;
            for (const auto* key : {&prefix_, &limit_key_}) {
                pb::WatchRequest req;
                auto* create = req.mutable_create_request();
                create->set_key(*key);
                if (key == &prefix_) create->set_range_end(prefix_range_end(prefix_));
                create->set_start_revision(seen_ + 1);
                written = written && stream->Write(req);
            }
            bool changed = false;
            pb::WatchResponse resp;
            while (written && !changed && stream->Read(&resp)) {
                if (resp.compact_revision() != 0) {  // changes may have been missed
                    seen_ = std::max(seen_, resp.header().revision());
                    changed = true;
                }
                for (const auto& ev : resp.events()) {
                    seen_ = std::max(seen_, ev.kv().mod_revision());
                    changed = true;
                }
                if (resp.canceled()) changed = true;
            }
            ctx.TryCancel();
            while (stream->Read(&resp)) {
            }
            const auto st = stream->Finish();
            if (changed) return true;
            if (steady::now() >= deadline) return false;
            fail(ec, code_for(st), "watch \"" + name_ + "\": etcd: " + status_text(st));
            return true;
        } catch (const std::exception& e) {
            fail(ec, errc::connection_failed, std::string("watch: ") + e.what());
            return true;
        }
    }

private:
    engine& engine_;
    std::string name_;
    std::string prefix_;
    std::string limit_key_;
    std::int64_t seen_ = 0;
};

std::unique_ptr<lock_watch> engine::watch(std::string_view name, std::error_code& ec) noexcept {
    ec.clear();
    return dlock::detail::guarded(ec, [&]() -> std::unique_ptr<lock_watch> {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return nullptr;
        auto w = std::make_unique<etcd_watch>(*this, std::string(name));
        if (!w->start(ec)) return nullptr;
        return w;
    });
}

void engine::set_permits(std::string_view name, std::uint32_t permits,
                         std::error_code& ec) noexcept {
    ec.clear();
    (void)dlock::detail::guarded(ec, [&]() -> bool {
        dlock::detail::validate_lock_name(name, max_name_length, ec);
        if (ec) return false;
        if (permits < 1) {
            fail(ec, errc::invalid_argument,
                 "set_permits(\"" + std::string(name) + "\"): permits must be >= 1, got 0");
            return false;
        }
        pb::PutRequest put;
        put.set_key(permits_key(endpoint_, name));
        put.set_value(std::to_string(permits));
        pb::PutResponse resp;
        const auto st =
            rpc(dlock::detail::deadline_after(steady::now(), options_.command_timeout),
                [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Put(&ctx, put, &resp); });
        if (!st.ok()) {
            fail(ec, code_for(st),
                 "set_permits(\"" + std::string(name) + "\"): etcd: " + status_text(st));
            return false;
        }
        return true;
    });
}

void engine::release(lease_core& lease, std::error_code& ec) noexcept {
    ec.clear();
    held_key held;
    bool found = false;
    bool stays = false;
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto it = registry_.find(&lease);
        if (it != registry_.end()) {
            held = std::move(it->second);
            registry_.erase(it);
            found = true;
            // recursive_mutex: another level of the grant holds the same key; it stays.
            stays = std::any_of(registry_.begin(), registry_.end(), [&](const auto& other) {
                return other.second.key == held.key && other.second.revision == held.revision &&
                       other.second.owner == held.owner;
            });
        }
    }
    const bool lost_before = lease.lost_token().stop_requested();
    lease.mark_released();
    try {
        if (!found) {
            return fail(ec, errc::lock_lost,
                        "lock \"" + lease.name() + "\": the client was closed; nothing to release");
        }
        if (stays && !lost_before) return;  // dlock::lease reports the released event
        bool was_there = false;
        const auto deadline =
            dlock::detail::deadline_after(steady::now(), options_.command_timeout);
        if (!delete_fenced(held.key, held.revision, *held.owner, deadline, was_there, held.prefix,
                           held.limit_key)) {
            {
                dlock::detail::lock_guard lock(mutex_);
                pending_.push_back(
                    {held.owner, held.prefix, held.turn, held.key, held.revision, held.limit_key});
                wake_ = true;
            }
            worker_cv_.notify_all();
            fail(ec, errc::connection_failed,
                 "release of \"" + lease.name() + "\": delete " + held.key +
                     " not answered; retried in the background, or it goes with the etcd lease");
            notify({event_kind::error, lease.name(), lease.fencing_token(), ec, steady::now()});
            return;
        }
        leave_turn(held.prefix, held.turn);
        if (!was_there || lost_before) {
            lease.note_loss(lost_reason::deleted);
            fail(ec, errc::lock_lost,
                 "lock \"" + lease.name() + "\": our key " + held.key +
                     " was already gone (deleted, or its etcd lease expired)");
        }
    } catch (...) {
        fail(ec, std::make_error_code(std::errc::not_enough_memory), "release: out of memory");
    }
}

steady::time_point engine::keep_alive(const std::shared_ptr<session>& s, steady::time_point now) {
    const auto retry = now + std::min<steady::duration>(milliseconds(200), s->ttl / 10);
    bool reopen = false;
    {
        dlock::detail::lock_guard lock(mutex_);
        if (ka_broken_ || (ka_session_ && now >= ka_late_)) {
            // The stream broke, or the keep-alive in flight was not answered in time: every
            // lock of the session is uncertain until a keep-alive on a new stream is answered.
            reopen = true;
            ka_broken_ = false;
            ka_session_.reset();
            s->healthy = false;
            // Tried again soon on a new stream, but not at once: a member that refuses every
            // stream (down, or not serving yet after a restart) gets one try per retry period.
            s->next_keep_alive = retry;
        }
    }
    if (reopen && stream_) {
        close_stream();
        // The member may be down: the next stream goes to the next one (once per failure, as in
        // rpc()).
        const auto index = current_.load() % endpoints_.size();
        auto expected = index;
        current_.compare_exchange_strong(expected, (index + 1) % endpoints_.size());
    }
    {
        dlock::detail::lock_guard lock(mutex_);
        if (ka_session_) return ka_late_;  // wait for its answer
        if (s->dead) return now + std::chrono::seconds(1);
        if (now < s->next_keep_alive) return s->next_keep_alive;
    }
    if (!stream_) {
        auto& e = *endpoints_[current_.load() % endpoints_.size()];
        stream_ = std::make_unique<keep_alive_stream>(*this, *e.lease);
    }
    const auto sent = steady::now();
    {
        dlock::detail::lock_guard lock(mutex_);
        ka_session_ = s;
        ka_sent_ = sent;
        // Bounded by command_timeout and by a third of the TTL, so a stream that stalls is
        // replaced while the validity margin lasts.
        ka_late_ = std::min(dlock::detail::deadline_after(sent, options_.command_timeout),
                            sent + s->ttl / 3);
    }
    if (!stream_->send(s->id)) {
        dlock::detail::lock_guard lock(mutex_);
        ka_broken_ = true;
        return now;
    }
    dlock::detail::lock_guard lock(mutex_);
    return ka_session_ ? ka_late_ : now;
}

void engine::keep_alive_answered(std::int64_t id, std::int64_t ttl) noexcept {
    {
        dlock::detail::lock_guard lock(mutex_);
        const auto s = std::move(ka_session_);
        ka_session_.reset();
        if (!s || s->id != id || s->dead) return;
        if (ttl <= 0) {
            // The lease expired or was revoked on the server: its keys are gone, so every lock of
            // the session is lost (check_leases) and the next acquire grants a new lease.
            s->dead = true;
            cancel_waits(s.get());
        } else {
            s->healthy = true;
            s->valid_until = std::max(
                s->valid_until, dlock::detail::valid_until(ka_sent_, std::chrono::seconds(ttl)));
            s->next_keep_alive = ka_sent_ + s->ttl / 3;
            s->check_due = true;
        }
        wake_ = true;
    }
    worker_cv_.notify_all();
}

void engine::keep_alive_broken() noexcept {
    {
        dlock::detail::lock_guard lock(mutex_);
        ka_broken_ = true;
        wake_ = true;
    }
    worker_cv_.notify_all();
}

void engine::close_stream() noexcept {
    if (!stream_) return;
    stream_->close();
    stream_.reset();
}

void engine::check_keys(const std::shared_ptr<session>& s,
                        std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>>& lost) {
    std::vector<std::pair<lease_core*, held_key>> keys;
    {
        dlock::detail::lock_guard lock(mutex_);
        for (const auto& [ptr, held] : registry_) {
            if (held.owner == s) keys.emplace_back(ptr, held);
        }
    }
    if (keys.empty()) return;
    pb::TxnRequest txn;
    for (const auto& [ptr, held] : keys) {
        compare_create(*txn.add_compare(), held.key, held.revision);
        txn.add_failure()->mutable_request_range()->set_key(held.key);
    }
    pb::TxnResponse resp;
    const auto st =
        rpc(background_deadline(steady::now()),
            [&](stubs& e, grpc::ClientContext& ctx) { return e.kv->Txn(&ctx, txn, &resp); });
    if (!st.ok() || resp.succeeded() || resp.responses_size() != static_cast<int>(keys.size())) {
        return;
    }
    // A key gone with its lease (revoked, or expired on the server) is a session that is over:
    // find out before the loss is reported, so that an acquire its holder starts on hearing of
    // the loss grants a new lease instead of writing under the revoked one (which would wait on
    // the lock step, not on a LeaseGrant, were the member to stall).
    const auto ours = [&](std::size_t i) {
        const auto& got = resp.responses(static_cast<int>(i)).response_range();
        return got.kvs_size() == 1 && got.kvs(0).create_revision() == keys[i].second.revision;
    };
    bool some_gone = false;
    for (std::size_t i = 0; i < keys.size(); ++i) some_gone = some_gone || !ours(i);
    if (!some_gone) return;
    bool revoked = false;
    {
        pb::LeaseTimeToLiveRequest req;
        req.set_id(s->id);
        pb::LeaseTimeToLiveResponse ttl;
        const auto asked =
            rpc(background_deadline(steady::now()), [&](stubs& e, grpc::ClientContext& ctx) {
                return e.lease->LeaseTimeToLive(&ctx, req, &ttl);
            });
        // etcd answers TTL -1 for a lease it does not have (some versions: NOT_FOUND).
        revoked = asked.ok() ? ttl.ttl() <= 0 : lease_gone(asked);
    }
    std::vector<std::pair<std::string, std::uint64_t>> turns;
    {
        dlock::detail::lock_guard lock(mutex_);
        if (revoked && !s->dead) {
            s->dead = true;
            cancel_waits(s.get());
        }
        for (std::size_t i = 0; i < keys.size(); ++i) {
            if (ours(i)) continue;
            const auto it = registry_.find(keys[i].first);
            if (it == registry_.end()) continue;
            auto l = it->second.lease.lock();
            if (!l || l->lost_token().stop_requested()) continue;
            lost.emplace_back(std::move(l),
                              revoked ? lost_reason::session_expired : lost_reason::deleted);
            // The key is not ours any more: another call of this client may queue again.
            turns.emplace_back(it->second.prefix, std::exchange(it->second.turn, 0));
        }
    }
    for (const auto& [prefix, turn] : turns) leave_turn(prefix, turn);
}

steady::time_point engine::check_leases(steady::time_point now) {
    std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>> lost;
    std::vector<std::shared_ptr<lease_core>> went_uncertain;
    std::vector<std::pair<std::string, std::uint64_t>> turns;  // given back outside mutex_
    auto next = now + std::chrono::seconds(1);
    {
        dlock::detail::lock_guard lock(mutex_);
        for (auto& [ptr, held] : registry_) {
            auto lease = held.lease.lock();
            if (!lease || lease->released() || lease->lost_token().stop_requested()) continue;
            const auto& s = *held.owner;
            const auto bound = std::min(s.valid_until, held.cap_valid);
            if (s.dead && now < bound) {  // expired or revoked on the server: the key is gone
                lost.emplace_back(lease, lost_reason::session_expired);
                turns.emplace_back(held.prefix, std::exchange(held.turn, 0));
                continue;
            }
            if (now >= bound) {
                const auto& plan = lease->plan();
                const bool capped =
                    now >= held.cap_valid && (plan.renew || plan.max_hold <= plan.lease);
                lost.emplace_back(lease, capped ? lost_reason::max_hold : lost_reason::expired);
                if (now >= held.cap_valid) {
                    // Nobody trusts the key any more: delete it (fenced); the local turn is given
                    // back once it is gone, as our lease would find it again.
                    pending_.push_back({held.owner, held.prefix, std::exchange(held.turn, 0),
                                        held.key, held.revision, held.limit_key});
                } else {
                    // The session was abandoned: later calls queue under a new lease (a key of
                    // their own), so the turn is free now.
                    turns.emplace_back(held.prefix, std::exchange(held.turn, 0));
                }
                continue;
            }
            lease->renewed(bound);
            if (!s.healthy && lease->renewal_failed()) went_uncertain.push_back(lease);
            next = std::min(next, now + (bound - now) / 2);
        }
    }
    for (const auto& [prefix, turn] : turns) leave_turn(prefix, turn);
    for (auto& lease : went_uncertain) lease->report_renewal_failed();
    for (auto& [lease, reason] : lost) lease->lose(make_error_code(errc::lock_lost), reason);
    return next;
}

steady::time_point engine::background_deadline(steady::time_point now) {
    auto deadline = dlock::detail::deadline_after(now, options_.command_timeout);
    dlock::detail::lock_guard lock(mutex_);
    for (const auto& [ptr, held] : registry_) {
        const auto lease = held.lease.lock();
        if (!lease || lease->released() || lease->lost_token().stop_requested() ||
            held.owner->dead) {
            continue;  // nothing left to report on time
        }
        deadline = std::min({deadline, held.owner->valid_until, held.cap_valid});
    }
    return deadline;
}

void engine::run_pending_deletes() {
    std::vector<pending_delete> todo;
    {
        dlock::detail::lock_guard lock(mutex_);
        todo.swap(pending_);
    }
    std::vector<pending_delete> again;
    for (auto& d : todo) {
        bool dead = false;
        {
            dlock::detail::lock_guard lock(mutex_);
            dead = d.owner->dead;
        }
        bool was_there = false;
        if (dead || delete_fenced(d.key, d.revision, *d.owner, background_deadline(steady::now()),
                                  was_there, d.prefix, d.limit_key)) {
            leave_turn(d.prefix, d.turn);
        } else {
            again.push_back(std::move(d));
        }
    }
    if (again.empty()) return;
    dlock::detail::lock_guard lock(mutex_);
    for (auto& d : again) pending_.push_back(std::move(d));
}

void engine::run(std::stop_token stop) {
    while (!stop.stop_requested()) {
        end_watches();
        auto now = steady::now();
        std::shared_ptr<session> s;
        {
            dlock::detail::lock_guard lock(mutex_);
            s = session_;
            if (s && !s->dead && now >= s->valid_until) {
                // Its validity passed unconfirmed: abandoned (no more keep-alives, so the server
                // expires it and its keys); its locks are lost below, a new acquire grants anew.
                s->dead = true;
                cancel_waits(s.get());
            }
            if (s && s->dead) s.reset();
        }
        auto next = now + std::chrono::seconds(1);
        std::vector<std::pair<std::shared_ptr<lease_core>, lost_reason>> lost;
        if (s) {
            next = keep_alive(s, now);
            bool check = false;
            {
                dlock::detail::lock_guard lock(mutex_);
                check = std::exchange(s->check_due, false) && s->healthy && !s->dead;
            }
            if (check) check_keys(s, lost);
        }
        for (auto& [lease, reason] : lost) lease->lose(make_error_code(errc::lock_lost), reason);
        run_pending_deletes();
        now = steady::now();
        next = std::min(next, check_leases(now));
        dlock::detail::unique_lock lock(mutex_);
        if (!pending_.empty()) next = std::min(next, now + milliseconds(200));
        worker_cv_.wait_until(lock, stop, next,
                              [&]() DLOCK_NO_THREAD_SAFETY_ANALYSIS { return wake_; });
        wake_ = false;
    }
}

}  // namespace dlock::etcd::detail
