// HF "BPE" model: a vocabulary plus ranked merges, applied to one pre-tokenized piece at a time. The merge
// loop is HF's: repeatedly merge the adjacent pair with the lowest rank (leftmost on ties).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gridq::text {

class BpeModel {
 public:
  // `j` is tokenizer.json's "model" object (type BPE).
  static Expected<BpeModel> from_json(const nlohmann::json& j);

  // Appends the ids of `piece` to `out`.
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string* id_to_token(int32_t id) const;   // nullptr if absent
  size_t vocab_size() const { return vocab_.size(); }
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct PairHash {
    size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
  };
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // [max id + 1], empty where no token
  std::unordered_map<uint64_t, Merge, PairHash> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace gridq::text
