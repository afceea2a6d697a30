#include "tls_certs.hpp"

#include "redis_server.hpp"

#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): mkdtemp

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace dlock::test {
namespace {

// A throw-away CA signs every leaf with `openssl ca`, which takes explicit validity dates (so an
// expired certificate is made without waiting or faking the clock).
constexpr const char* script = R"(set -e
cd "$1"
cat > ca.cnf <<'CNF'
[ca]
default_ca = test_ca
[test_ca]
dir = .
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[any]
commonName = supplied
CNF
: > index.txt
echo 01 > serial
key="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $key -keyout ca.key -out ca.pem -days 3650 -subj "/CN=dlock test CA"
openssl req -x509 $key -keyout other-ca.key -out other-ca.pem -days 3650 -subj "/CN=dlock other CA"
leaf() {
  openssl req $key -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" -addext "subjectAltName=$3"
  openssl ca -batch -config ca.cnf -cert "$2.pem" -keyfile "$2.key" -in "$1.csr" -out "$1.pem" \
    -startdate "$4" -enddate "$5" -notext
}
leaf server ca "DNS:localhost,IP:127.0.0.1" 20200101000000Z 20991231000000Z
leaf localhost ca "DNS:localhost" 20200101000000Z 20991231000000Z
leaf expired ca "DNS:localhost,IP:127.0.0.1" 20200101000000Z 20200102000000Z
leaf stranger other-ca "DNS:localhost,IP:127.0.0.1" 20200101000000Z 20991231000000Z
leaf client ca "DNS:dlock-client" 20200101000000Z 20991231000000Z
)";

}  // namespace

tls_certs::tls_certs() {
    char tmpl[] = "/tmp/dlock-certs.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr)
        throw std::runtime_error(std::string("tls_certs: mkdtemp: ") + std::strerror(errno));
    dir_ = tmpl;
    std::ofstream(dir_ + "/make.sh") << script;
    const std::string command = "sh " + dir_ + "/make.sh " + dir_ + " > " + dir_ + "/make.log 2>&1";
    if (std::system(command.c_str()) != 0) {  // NOLINT(cert-env33-c): a fixed test script
        std::ifstream log(dir_ + "/make.log");
        const std::string text((std::istreambuf_iterator<char>(log)), {});
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw std::runtime_error("tls_certs: openssl failed:\n" + text);
    }
}

tls_certs::~tls_certs() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

tls_certs& shared_tls_certs() {
    static tls_certs certs;
    return certs;
}

redis_server& shared_tls_redis() {
    static redis_server server({.tls_dir = shared_tls_certs().dir()});
    return server;
}

}  // namespace dlock::test
