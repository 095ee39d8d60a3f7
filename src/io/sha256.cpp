#include "io/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace gridq::io {

namespace {

struct CtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxFree>;

std::string to_hex(const unsigned char* d, unsigned n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

Ctx new_ctx() {
  Ctx c(EVP_MD_CTX_new());
  if (c && EVP_DigestInit_ex(c.get(), EVP_sha256(), nullptr) != 1) c.reset();
  return c;
}

}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Ctx c = new_ctx();
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  // OpenSSL failing on in-memory SHA-256 means the library is broken; there is no error to recover from.
  if (!c || EVP_DigestUpdate(c.get(), bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(c.get(), d, &n) != 1) {
    std::abort();
  }
  return to_hex(d, n);
}

Expected<std::string> sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open: {}", path, std::strerror(errno));
  Ctx c = new_ctx();
  if (!c) {
    ::close(fd);
    return err("{}: OpenSSL SHA-256 init failed", path);
  }
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      ::close(fd);
      return err("{}: read failed: {}", path, std::strerror(e));
    }
    if (r == 0) break;
    if (EVP_DigestUpdate(c.get(), buf.data(), static_cast<size_t>(r)) != 1) {
      ::close(fd);
      return err("{}: OpenSSL SHA-256 update failed", path);
    }
  }
  ::close(fd);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_DigestFinal_ex(c.get(), d, &n) != 1) return err("{}: OpenSSL SHA-256 final failed", path);
  return to_hex(d, n);
}

}  // namespace gridq::io
