// Why a TLS server's certificate was refused, in words that name the cause (docs/tls.md). Shared by
// the backends that speak TLS (Redis's own transport, etcd's probe after a failed gRPC connect);
// header-only because only they link OpenSSL, not the core.
#pragma once

#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <string>

namespace dlock::detail {

/// `result`: SSL_get_verify_result's; `name`: the host name or address checked; `custom_ca`: a CA
/// was given (tls_ca / tls_ca_dir), so the hint is to check it rather than to give one.
inline std::string tls_verify_problem(long result, const std::string& name, bool custom_ca) {
    const std::string detail = X509_verify_cert_error_string(result);
    switch (result) {
        case X509_V_ERR_HOSTNAME_MISMATCH:
            return "hostname mismatch: the server's certificate is not for \"" + name +
                   "\" (give the name it carries with tls_server_name)";
        case X509_V_ERR_IP_ADDRESS_MISMATCH:
            return "hostname mismatch: the server's certificate is not for \"" + name +
                   "\" (IP address mismatch; give the name it carries with tls_server_name)";
        case X509_V_ERR_CERT_HAS_EXPIRED:
            return "the server's certificate has expired (" + detail + ")";
        case X509_V_ERR_CERT_NOT_YET_VALID:
            return "the server's certificate is not valid yet (" + detail + ")";
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
        case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
        case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            return "unknown CA: the server's certificate is not signed by a CA trusted here (" +
                   detail +
                   (custom_ca ? "; check the CA given)"
                              : "; give the server's CA with tls_ca / --tls-ca)");
        default: return "the server's certificate was refused (" + detail + ")";
    }
}

}  // namespace dlock::detail
