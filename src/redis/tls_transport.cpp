#include "redis/tls_transport.hpp"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "core/tls_verify.hpp"
#include "core/status.hpp"

namespace dlock::redis::detail {
namespace {

using dlock::detail::fail;
using dlock::detail::redis_endpoint;

// --- a BIO over the socket that never raises SIGPIPE --------------------------------------------
// OpenSSL's socket BIO writes with write(2): a peer that closed makes that SIGPIPE, which kills a
// process that did not ignore it. This one sends with MSG_NOSIGNAL (EPIPE is then an error like
// any other).

int descriptor(BIO* bio) { return *static_cast<const int*>(BIO_get_data(bio)); }

int bio_write(BIO* bio, const char* data, int size) {
    BIO_clear_retry_flags(bio);
    for (;;) {
        const ssize_t n =
            ::send(descriptor(bio), data, static_cast<std::size_t>(size), MSG_NOSIGNAL);
        if (n >= 0) return static_cast<int>(n);
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
        return -1;
    }
}

int bio_read(BIO* bio, char* data, int size) {
    BIO_clear_retry_flags(bio);
    for (;;) {
        const ssize_t n = ::recv(descriptor(bio), data, static_cast<std::size_t>(size), 0);
        if (n >= 0) return static_cast<int>(n);  // 0: the peer closed its side
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
        return -1;
    }
}

long bio_ctrl(BIO* /*bio*/, int command, long /*num*/, void* /*ptr*/) {
    return command == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is buffered here
}

int bio_create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
}

BIO_METHOD* socket_method() {
    static BIO_METHOD* const method = [] {
        BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
        BIO_meth_set_write(m, bio_write);
        BIO_meth_set_read(m, bio_read);
        BIO_meth_set_ctrl(m, bio_ctrl);
        BIO_meth_set_create(m, bio_create);
        return m;
    }();
    return method;
}

// --- contexts ------------------------------------------------------------------------------------

/// OpenSSL's reason for the latest error of this thread, or `fallback`.
std::string openssl_reason(const char* fallback) {
    const unsigned long e = ERR_peek_last_error();
    const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
    return reason != nullptr ? reason : fallback;
}

struct context_deleter {
    void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};

/// One context per set of files (loading a trust store costs milliseconds; every pooled
/// connection of a client shares it). Kept while a transport uses it.
std::shared_ptr<SSL_CTX> context_for(const tls_options& o, const std::string& where,
                                     std::error_code& ec) {
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<SSL_CTX>> contexts;  // guarded by mutex
    std::string key = o.ca_file;
    for (const auto* part : {&o.ca_dir, &o.cert_file, &o.key_file}) {
        key += '\0';
        key += *part;
    }
    const std::lock_guard lock(mutex);
    if (auto found = contexts[key].lock()) return found;
    ERR_clear_error();
    std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), context_deleter{});
    const auto bad = [&](const std::string& what) {
        fail(ec, errc::invalid_argument, "redis " + where + ": " + what);
        return nullptr;
    };
    if (!ctx) return bad("cannot set up TLS: " + openssl_reason("SSL_CTX_new failed"));
    SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
    // Partial writes, and a retry with a buffer that moved (the output string grows): the
    // connection retries a would-block write with the same unsent bytes, plus any queued since.
    SSL_CTX_set_mode(ctx.get(),
                     SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // One recv() per reply instead of two (record header, then body); what is read past a
    // record waits in OpenSSL, which buffered() reports.
    SSL_CTX_set_read_ahead(ctx.get(), 1);
    if (!o.ca_file.empty() || !o.ca_dir.empty()) {
        if (SSL_CTX_load_verify_locations(ctx.get(),
                                          o.ca_file.empty() ? nullptr : o.ca_file.c_str(),
                                          o.ca_dir.empty() ? nullptr : o.ca_dir.c_str()) != 1) {
            return bad("cannot load the TLS CA " +
                       (o.ca_file.empty() ? "directory \"" + o.ca_dir : "file \"" + o.ca_file) +
                       "\": " + openssl_reason("unreadable"));
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
        return bad("cannot load the system's TLS trust store: " + openssl_reason("failed"));
    }
    if (!o.cert_file.empty()) {
        if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.cert_file.c_str()) != 1) {
            return bad("cannot load the TLS client certificate \"" + o.cert_file +
                       "\": " + openssl_reason("unreadable"));
        }
        if (SSL_CTX_use_PrivateKey_file(ctx.get(), o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
            return bad("cannot load the TLS client key \"" + o.key_file +
                       "\": " + openssl_reason("unreadable"));
        }
        if (SSL_CTX_check_private_key(ctx.get()) != 1) {
            return bad("the TLS client key \"" + o.key_file +
                       "\" does not match the certificate \"" + o.cert_file + "\"");
        }
    }
    contexts[key] = ctx;
    return ctx;
}

bool is_ip_address(const std::string& host) {
    std::array<unsigned char, 16> buffer{};
    return ::inet_pton(AF_INET, host.c_str(), buffer.data()) == 1 ||
           ::inet_pton(AF_INET6, host.c_str(), buffer.data()) == 1;
}

class tls_transport final : public transport {
public:
    tls_transport(redis_endpoint endpoint, std::shared_ptr<SSL_CTX> context)
        : endpoint_(std::move(endpoint)),
          context_(std::move(context)),
          socket_(make_socket_transport(endpoint_)),
          name_(endpoint_.tls.server_name.empty() ? endpoint_.host : endpoint_.tls.server_name) {}
    ~tls_transport() override { close(); }
    tls_transport(const tls_transport&) = delete;
    tls_transport& operator=(const tls_transport&) = delete;

    bool start_connect(std::error_code& ec) override {
        close();
        return socket_->start_connect(ec);
    }

    bool finish_connect(std::error_code& ec) override { return socket_->finish_connect(ec); }

    bool handshake(std::error_code& ec) override {
        if (ssl_ == nullptr && !make_ssl(ec)) return false;
        ERR_clear_error();
        const int r = SSL_connect(ssl_);
        if (r == 1) {
            handshake_done_ = true;
            return true;
        }
        const int error = SSL_get_error(ssl_, r);
        if (would_block(error, handshake_wants_)) return false;
        const long verified = SSL_get_verify_result(ssl_);
        if (verified != X509_V_OK && !endpoint_.tls.insecure_skip_verify) {
            const bool custom_ca = !endpoint_.tls.ca_file.empty() || !endpoint_.tls.ca_dir.empty();
            return failed(ec, "TLS handshake failed: certificate verify failed: " +
                                  dlock::detail::tls_verify_problem(verified, name_, custom_ca));
        }
        return failed(ec, "TLS handshake failed: " + stream_problem(error));
    }

    std::size_t write_some(std::string_view bytes, std::error_code& ec) override {
        ERR_clear_error();
        std::size_t written = 0;
        const int r = SSL_write_ex(ssl_, bytes.data(), bytes.size(), &written);
        if (r == 1) return written;
        const int error = SSL_get_error(ssl_, r);
        if (!would_block(error, write_wants_)) failed(ec, "write failed: " + stream_problem(error));
        return 0;
    }

    std::size_t read_some(char* buffer, std::size_t size, std::error_code& ec) override {
        ERR_clear_error();
        std::size_t read = 0;
        const int r = SSL_read_ex(ssl_, buffer, size, &read);
        if (r == 1) {
            answered_ = true;
            read_wants_ = POLLIN;  // a read that wanted to write first (a key update) is past
            return read;
        }
        const int error = SSL_get_error(ssl_, r);
        if (!would_block(error, read_wants_)) failed(ec, stream_problem(error));
        return 0;
    }

    short wanted_events(stream_op op) const noexcept override {
        switch (op) {
            case stream_op::handshake: return handshake_wants_;
            case stream_op::read: return read_wants_;
            case stream_op::write: return write_wants_;
        }
        return POLLIN;
    }

    bool buffered() const noexcept override {
        return ssl_ != nullptr && SSL_has_pending(ssl_) == 1;
    }

    bool idle_stream_broken() const noexcept override {
        if (ssl_ == nullptr || !handshake_done_) return true;
        for (;;) {
            if (SSL_has_pending(ssl_) == 1) return true;  // stray application data
            pollfd p{socket_->native_handle(), POLLIN, 0};
            if (::poll(&p, 1, 0) == 0) return false;
            // Readable: a TLS 1.3 session ticket is fine (OpenSSL takes it and reads on); data,
            // an alert, EOF or an error mean the stream is out of use.
            ERR_clear_error();
            char byte = 0;
            std::size_t read = 0;
            const int r = SSL_read_ex(ssl_, &byte, 1, &read);
            if (r == 1 || SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ) return true;
        }
    }

    int native_handle() const noexcept override { return socket_->native_handle(); }

    void close() noexcept override {
        if (ssl_ != nullptr) {
            // A close_notify if the socket takes it now; never waits for the server's.
            if (handshake_done_) SSL_shutdown(ssl_);
            SSL_free(ssl_);
            ssl_ = nullptr;
        }
        ERR_clear_error();
        handshake_done_ = false;
        answered_ = false;
        handshake_wants_ = POLLOUT;
        read_wants_ = POLLIN;
        write_wants_ = POLLOUT;
        socket_->close();
    }

private:
    bool make_ssl(std::error_code& ec) {
        ssl_ = SSL_new(context_.get());
        BIO* bio = ssl_ != nullptr ? BIO_new(socket_method()) : nullptr;
        if (bio == nullptr)
            return failed(ec, "cannot set up TLS: " + openssl_reason("out of memory"));
        fd_ = native_handle();
        BIO_set_data(bio, &fd_);  // the transport outlives its SSL (close() frees it)
        SSL_set_bio(ssl_, bio, bio);
        SSL_set_connect_state(ssl_);
        const bool ip = is_ip_address(name_);
        // SNI names a host; RFC 6066 forbids an address there.
        if (!ip && SSL_set_tlsext_host_name(ssl_, name_.c_str()) != 1)
            return failed(ec, "cannot set the TLS server name: " + openssl_reason("rejected"));
        if (endpoint_.tls.insecure_skip_verify) {
            SSL_set_verify(ssl_, SSL_VERIFY_NONE, nullptr);
            return true;
        }
        SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
        const int named = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name_.c_str())
                             : SSL_set1_host(ssl_, name_.c_str());
        if (named != 1) {
            return failed(ec, "cannot check the server's certificate for \"" + name_ +
                                  "\": " + openssl_reason("rejected"));
        }
        return true;
    }

    /// true (and `wants` set) for WANT_READ / WANT_WRITE.
    static bool would_block(int error, short& wants) noexcept {
        if (error == SSL_ERROR_WANT_READ) {
            wants = POLLIN;
            return true;
        }
        if (error == SSL_ERROR_WANT_WRITE) {
            wants = POLLOUT;
            return true;
        }
        return false;
    }

    /// The cause of a failed SSL call, in words.
    std::string stream_problem(int error) const {
        const int saved_errno = errno;
        const unsigned long e = ERR_peek_last_error();
        const int reason = e != 0 && ERR_GET_LIB(e) == ERR_LIB_SSL ? ERR_GET_REASON(e) : 0;
        // A close_notify (SSL_ERROR_ZERO_RETURN) or EOF with no other detail: the default text.
        std::string what = "connection closed by the server";
        if (error == SSL_ERROR_ZERO_RETURN) return with_hint(what);
        if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
            what = "connection closed by the server without a TLS close_notify";
        } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED) {
            what = "the server requires a client certificate (tls alert certificate required)";
        } else if (e != 0) {
            what = openssl_reason("TLS error");
        } else if (error == SSL_ERROR_SYSCALL && saved_errno != 0) {
            what = std::system_category().message(saved_errno);
        }
        return with_hint(what);
    }

    std::string with_hint(std::string what) const {
        // A server that refuses a client without a certificate drops the connection right after
        // the handshake (TLS 1.3) or during it (TLS 1.2), before any reply: say so.
        if (!answered_ && endpoint_.tls.cert_file.empty() &&
            what.find("client certificate") == std::string::npos) {
            what +=
                " (before any reply: the server may require a client certificate; give one "
                "with tls_cert and tls_key / --tls-cert and --tls-key)";
        }
        return what;
    }

    bool failed(std::error_code& ec, const std::string& what) const {
        fail(ec, errc::connection_failed, "redis " + endpoint_.describe() + ": " + what);
        return false;
    }

    redis_endpoint endpoint_;
    std::shared_ptr<SSL_CTX> context_;
    std::unique_ptr<transport> socket_;
    std::string name_;  // the name the certificate must carry
    SSL* ssl_ = nullptr;
    int fd_ = -1;  // the socket, for the BIO (BIO_get_data)
    bool handshake_done_ = false;
    bool answered_ = false;  // any application data read on this connection
    short handshake_wants_ = POLLOUT;
    short read_wants_ = POLLIN;
    short write_wants_ = POLLOUT;
};

}  // namespace

std::unique_ptr<transport> make_tls_transport(const redis_endpoint& endpoint, std::error_code& ec) {
    auto context = context_for(endpoint.tls, endpoint.describe(), ec);
    if (ec) return nullptr;
    return std::make_unique<tls_transport>(endpoint, std::move(context));
}

}  // namespace dlock::redis::detail
