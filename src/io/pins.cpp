#include "io/pins.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/checkpoint.h"
#include "io/sha256.h"

namespace gridq::io {

namespace fs = std::filesystem;

namespace {

// name -> size of every regular file under dir, PINS.json at the top level excluded.
Expected<std::map<std::string, uint64_t>> list_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return err("{}: not a directory", dir);
  std::map<std::string, uint64_t> out;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return err("{}: cannot list: {}", dir, ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return err("{}: cannot list: {}", dir, ec.message());
    const fs::path& p = it->path();
    const std::string rel = p.lexically_relative(dir).generic_string();
    fs::file_status st = it->symlink_status(ec);
    if (ec) return err("{}: cannot stat {}: {}", dir, rel, ec.message());
    if (fs::is_symlink(st))
      return err("{}: {} is a symlink; pinned artifacts hold regular files only", dir, rel);
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) return err("{}: {} is not a regular file", dir, rel);
    if (rel == kPinsFile) continue;
    uint64_t size = fs::file_size(p, ec);
    if (ec) return err("{}: cannot stat {}: {}", dir, rel, ec.message());
    out[rel] = size;
  }
  if (ec) return err("{}: cannot list: {}", dir, ec.message());
  return out;
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Expected<std::map<std::string, Pin>> compute_pins(const std::string& dir) {
  GRIDQ_ASSIGN_OR_RETURN(auto files, list_files(dir));
  std::map<std::string, Pin> out;
  for (const auto& [rel, size] : files) {
    GRIDQ_ASSIGN_OR_RETURN(std::string h, sha256_file((fs::path(dir) / rel).string()));
    out[rel] = Pin{std::move(h), size};
  }
  return out;
}

Expected<std::map<std::string, Pin>> read_pins(const std::string& dir) {
  const std::string path = (fs::path(dir) / kPinsFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return err("{}: missing {}", dir, kPinsFile);
  GRIDQ_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(path));
  if (!j.is_object() || j.size() != 2 || !j.contains("version") || !j.contains("files")) {
    return err("{}: expected exactly the keys \"version\" and \"files\"", path);
  }
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != 1) {
    return err("{}: unsupported version {} (expected 1)", path, j["version"].dump());
  }
  if (!j["files"].is_object()) return err("{}: \"files\" is not an object", path);
  std::map<std::string, Pin> out;
  for (const auto& [name, v] : j["files"].items()) {
    if (!v.is_object() || v.size() != 2 || !v.contains("sha256") || !v.contains("size") ||
        !v["sha256"].is_string() || !is_hex64(v["sha256"].get<std::string>()) ||
        !v["size"].is_number_unsigned()) {
      return err("{}: entry for '{}' is not {{\"sha256\": <64 lowercase hex>, \"size\": <unsigned>}}", path,
                 name);
    }
    out[name] = Pin{v["sha256"].get<std::string>(), v["size"].get<uint64_t>()};
  }
  return out;
}

Status write_pins(const std::string& dir) {
  GRIDQ_ASSIGN_OR_RETURN(auto pins, compute_pins(dir));
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, p] : pins) files[name] = {{"sha256", p.sha256}, {"size", p.size}};
  nlohmann::json j = {{"version", 1}, {"files", std::move(files)}};
  const std::string text = j.dump(2) + "\n";
  const std::string path = (fs::path(dir) / kPinsFile).string();
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return err("{}: cannot create: {}", tmp, std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return err("{}: write failed: {}", tmp, std::strerror(e));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return err("{}: fsync/close failed: {}", tmp, std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return err("{}: rename failed: {}", path, std::strerror(e));
  }
  return {};
}

Status verify_pins(const std::string& dir) {
  GRIDQ_ASSIGN_OR_RETURN(auto pins, read_pins(dir));
  GRIDQ_ASSIGN_OR_RETURN(auto files, list_files(dir));
  std::vector<std::string> problems;
  for (const auto& [name, pin] : pins) {
    auto it = files.find(name);
    if (it == files.end()) {
      problems.push_back(fmt::format("missing file {} (pinned, not present)", name));
      continue;
    }
    if (it->second != pin.size) {
      problems.push_back(fmt::format("modified file {}: size {} but pinned {}", name, it->second, pin.size));
      continue;
    }
    GRIDQ_ASSIGN_OR_RETURN(std::string h, sha256_file((fs::path(dir) / name).string()));
    if (h != pin.sha256) {
      problems.push_back(fmt::format("modified file {}: sha256 {} but pinned {}", name, h, pin.sha256));
    }
  }
  for (const auto& [name, _] : files) {
    if (!pins.contains(name)) problems.push_back(fmt::format("extra file {} (present, not pinned)", name));
  }
  if (problems.empty()) return {};
  std::string msg = fmt::format("{}: {} does not match ({} problem{}):", dir, kPinsFile, problems.size(),
                                problems.size() == 1 ? "" : "s");
  for (const auto& p : problems) msg += "\n  " + p;
  return Error{msg};
}

}  // namespace gridq::io
