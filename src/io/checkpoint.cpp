// Checkpoint directory rules (fail closed):
//  - the directory and config.json exist; config.json is one JSON object with no duplicate keys
//  - with model.safetensors.index.json: "weight_map" is an object of tensor name -> shard file name; each
//    shard is a plain file name inside the directory (no '/', no '..'); every named shard exists and is
//    opened once; every indexed tensor is in its shard; no tensor is in two shards; every shard tensor is
//    indexed; no other *.safetensors file lies in the directory (a stale shard would otherwise be ignored
//    silently)
//  - without an index: exactly one *.safetensors file, named model.safetensors
#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "io/json_strict.h"

namespace gridq::io {

namespace fs = std::filesystem;

Expected<nlohmann::json> read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return err("{}: read failed", path);
  std::string text = ss.str();
  if (size_t bad = find_invalid_utf8(text); bad != std::string::npos) {
    return err("{}: not valid UTF-8 (byte {})", path, bad);
  }
  return parse_json_strict(text, path);
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [k, _] : by_name_) out.push_back(k);
  return out;
}

uint64_t Checkpoint::total_tensor_bytes() const {
  uint64_t n = 0;
  for (const auto& [_, t] : by_name_) n += t->nbytes();
  return n;
}

Expected<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return err("{}: not a directory", dir);
  auto ck = std::make_unique<Checkpoint>();
  ck->dir_ = dir;
  const fs::path root(dir);
  const std::string cfg_path = (root / "config.json").string();
  if (!fs::exists(cfg_path, ec)) return err("{}: missing config.json", dir);
  GRIDQ_ASSIGN_OR_RETURN(ck->config_, read_json_file(cfg_path));
  if (!ck->config_.is_object()) return err("{}: not a JSON object", cfg_path);

  std::set<std::string> on_disk;  // *.safetensors file names in the directory
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 12 && n.ends_with(".safetensors")) on_disk.insert(n);
  }
  if (ec) return err("{}: cannot list directory: {}", dir, ec.message());

  const std::string idx_path = (root / "model.safetensors.index.json").string();
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  bool has_index = fs::exists(idx_path, ec);
  if (has_index) {
    GRIDQ_ASSIGN_OR_RETURN(nlohmann::json idx, read_json_file(idx_path));
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object()) {
      return err("{}: missing \"weight_map\" object", idx_path);
    }
    for (const auto& [t, s] : idx["weight_map"].items()) {
      if (!s.is_string()) return err("{}: weight_map entry '{}' is not a string", idx_path, t);
      const std::string& shard = s.get_ref<const std::string&>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == ".." ||
          shard.find('\\') != std::string::npos) {
        return err("{}: tensor '{}': shard '{}' is not a plain file name in the directory", idx_path, t,
                   shard);
      }
      weight_map[t] = shard;
    }
    if (weight_map.empty()) return err("{}: weight_map is empty", idx_path);
  } else {
    if (on_disk.empty()) return err("{}: no model.safetensors and no model.safetensors.index.json", dir);
    if (on_disk.size() > 1 || !on_disk.contains("model.safetensors")) {
      std::string list;
      for (const auto& n : on_disk) list += (list.empty() ? "" : ", ") + n;
      return err(
          "{}: safetensors files [{}] without model.safetensors.index.json; expected a single "
          "model.safetensors or an index naming the shards",
          dir, list);
    }
  }

  std::set<std::string> shards;
  if (has_index) {
    for (const auto& [_, s] : weight_map) shards.insert(s);
  } else {
    shards.insert("model.safetensors");
  }
  for (const auto& n : on_disk) {
    if (!shards.contains(n)) {
      return err("{}: {} is not named by model.safetensors.index.json (stale shard?)", dir, n);
    }
  }
  std::map<std::string, std::string, std::less<>> shard_of;  // tensor -> shard actually holding it
  for (const std::string& s : shards) {
    const std::string p = (root / s).string();
    if (!fs::exists(p, ec)) {
      return err("{}: shard {} named by model.safetensors.index.json does not exist", dir, s);
    }
    GRIDQ_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(p));
    for (const TensorInfo& t : f->tensors()) {
      auto [it, fresh] = shard_of.emplace(t.name, s);
      if (!fresh) return err("{}: tensor '{}' is in two shards: {} and {}", dir, t.name, it->second, s);
      ck->by_name_.emplace(t.name, &t);
    }
    ck->files_.push_back(std::move(f));
  }
  if (has_index) {
    for (const auto& [t, s] : shard_of) {
      auto w = weight_map.find(t);
      if (w == weight_map.end()) {
        return err("{}: tensor '{}' in shard {} is not listed in model.safetensors.index.json", dir, t, s);
      }
      if (w->second != s) {
        return err("{}: tensor '{}' is in shard {} but model.safetensors.index.json names shard {}", dir, t,
                   s, w->second);
      }
    }
  }
  for (const auto& [t, s] : weight_map) {
    if (!shard_of.contains(t)) {
      return err(
          "{}: tensor '{}' is listed in model.safetensors.index.json for shard {} but that shard lacks it",
          dir, t, s);
    }
  }
  return ck;
}

}  // namespace gridq::io
