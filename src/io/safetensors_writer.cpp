// Streaming safetensors writer. The header is known from the declarations, so it is written first and
// tensor bytes follow in declaration order; the file appears under its final name only after finish().
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/safetensors.h"

namespace gridq::io {

struct SafetensorsWriter::Impl {
  std::string path;
  std::string tmp;
  int fd = -1;
  std::vector<uint64_t> ends;  // cumulative end offset of each declared tensor, in declaration order
  std::vector<std::string> names;
  uint64_t total = 0;    // bytes of the data region
  uint64_t written = 0;  // data bytes written so far
  bool finished = false;
  std::optional<Error> failed;  // sticky: after the first failure every call refuses

  Status fail(Error e) {
    failed = e;
    return e;
  }
};

namespace {

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& tmp) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return err("{}: write failed: {}", tmp, std::strerror(errno));
    if (w == 0) return err("{}: short write (device full?)", tmp);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return {};
}

std::string parent_dir(const std::string& path) {
  size_t s = path.rfind('/');
  if (s == std::string::npos) return ".";
  if (s == 0) return "/";
  return path.substr(0, s);
}

}  // namespace

Expected<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::create(
    const std::string& path, std::vector<Decl> decls, std::map<std::string, std::string> metadata) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->tmp = path + ".tmp";
  nlohmann::json hdr = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    hdr["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t off = 0;
  for (const Decl& d : decls) {
    if (d.name.empty()) return err("{}: tensor with an empty name", path);
    if (d.name == "__metadata__") return err("{}: tensor name '__metadata__' is reserved", path);
    if (!seen.insert(d.name).second) return err("{}: tensor '{}' declared twice", path, d.name);
    if (dtype_size(d.dtype) == 0) return err("{}: tensor '{}': invalid dtype", path, d.name);
    uint64_t n = 1;
    for (int64_t dim : d.shape) {
      if (dim < 0) return err("{}: tensor '{}': negative dimension {}", path, d.name, dim);
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n)) {
        return err("{}: tensor '{}': element count overflows", path, d.name);
      }
    }
    uint64_t bytes = 0;
    uint64_t end = 0;
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(d.dtype)), &bytes) ||
        __builtin_add_overflow(off, bytes, &end)) {
      return err("{}: tensor '{}': byte size overflows", path, d.name);
    }
    hdr[d.name] = {{"dtype", dtype_name(d.dtype)}, {"shape", d.shape}, {"data_offsets", {off, end}}};
    off = end;
    impl->ends.push_back(end);
    impl->names.push_back(d.name);
  }
  impl->total = off;
  // Compact JSON, sorted keys, padded with spaces to a multiple of 8 so the data region is 8-aligned (as the
  // reference Python/Rust writer does).
  std::string text = hdr.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> head(8 + text.size());
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(head.data() + 8, text.data(), text.size());

  impl->fd = ::open(impl->tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0) return err("{}: cannot create: {}", impl->tmp, std::strerror(errno));
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->impl_ = std::move(impl);
  GRIDQ_RETURN_IF_ERROR(write_all(w->impl_->fd, head.data(), head.size(), w->impl_->tmp));
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!impl_) return;
  if (impl_->fd >= 0) ::close(impl_->fd);
  if (!impl_->finished) ::unlink(impl_->tmp.c_str());
}

Status SafetensorsWriter::write(std::span<const uint8_t> bytes) {
  Impl& m = *impl_;
  if (m.failed) return *m.failed;
  if (m.finished) return m.fail(err("{}: write after finish()", m.path));
  if (bytes.size() > m.total - m.written) {
    return m.fail(err("{}: too many bytes: {} more would exceed the {} declared data bytes ({} written)",
                      m.path, bytes.size(), m.total, m.written));
  }
  if (Status s = write_all(m.fd, bytes.data(), bytes.size(), m.tmp); !s.ok()) return m.fail(s.error());
  m.written += bytes.size();
  return {};
}

Status SafetensorsWriter::finish() {
  Impl& m = *impl_;
  if (m.failed) return *m.failed;
  if (m.finished) return err("{}: finish() called twice", m.path);
  if (m.written != m.total) {
    // Name the first tensor that did not receive all its bytes.
    size_t i = 0;
    while (i < m.ends.size() && m.ends[i] <= m.written) ++i;
    return m.fail(err("{}: short write: {} of {} declared data bytes written (tensor '{}' incomplete)",
                      m.path, m.written, m.total, i < m.names.size() ? m.names[i] : std::string("?")));
  }
  if (::fsync(m.fd) != 0) return m.fail(err("{}: fsync failed: {}", m.tmp, std::strerror(errno)));
  int fd = m.fd;
  m.fd = -1;
  if (::close(fd) != 0) return m.fail(err("{}: close failed: {}", m.tmp, std::strerror(errno)));
  if (::rename(m.tmp.c_str(), m.path.c_str()) != 0) {
    return m.fail(err("{}: rename from {} failed: {}", m.path, m.tmp, std::strerror(errno)));
  }
  m.finished = true;
  // Persist the rename itself.
  int dfd = ::open(parent_dir(m.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

}  // namespace gridq::io
