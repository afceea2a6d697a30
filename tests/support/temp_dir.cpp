#include "temp_dir.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace dlock::test {

temp_dir::temp_dir(std::string_view stem) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(stem) + ".XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
        throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    path_ = std::move(pattern);
}

temp_dir::~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

std::string temp_dir::operator/(std::string_view file) const {
    return path_ + "/" + std::string(file);
}

std::string temp_dir::write(std::string_view file, std::string_view text) const {
    const auto path = *this / file;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error("cannot write " + path);
    return path;
}

void write_atomically(const std::string& path, std::string_view text) {
    const auto tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << text;
        if (!out.flush()) throw std::runtime_error("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        throw std::runtime_error("rename " + tmp + ": " + std::strerror(errno));
    }
}

std::string read_text(const std::string& path) {
    // operator<< of a streambuf turns a read error into failbit (a /proc file of a process that
    // exited meanwhile fails with ESRCH): what was read so far, never an exception.
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    if (in) text << in.rdbuf();
    return text.str();
}

std::string read_tail(const std::string& path, std::size_t bytes) {
    auto text = read_text(path);
    return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace dlock::test
