// A Hugging Face checkpoint directory: config.json, one model.safetensors or shards listed by
// model.safetensors.index.json, tokenizer files. Opens every shard once and offers one name -> tensor view.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"

namespace gridq::io {

class Checkpoint {
 public:
  // Refuses: missing dir or config.json, malformed JSON, index naming a missing shard, a tensor in two
  // shards, an index entry whose shard lacks the tensor, shard tensors not listed by the index.
  static Expected<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  std::vector<std::string> names() const;               // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_tensor_bytes() const;

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Reads a whole small JSON file with a clear error naming the path on failure.
Expected<nlohmann::json> read_json_file(const std::string& path);

}  // namespace gridq::io
