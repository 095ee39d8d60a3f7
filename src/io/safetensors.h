// safetensors container: a strict mmap reader and a streaming writer.
//
// File layout: u64 little-endian header length N, N bytes of UTF-8 JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data region.
// The reader refuses anything that is not exactly that (see validate rules in safetensors.cpp); the
// writer streams tensor bytes to disk one tensor at a time so a whole model is never held in memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gridq::io {

enum class DType { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2 };

std::string_view dtype_name(DType d);               // the safetensors spelling, e.g. "BF16", "F8_E4M3"
Expected<DType> dtype_from_name(std::string_view s);  // refuses unknown spellings
size_t dtype_size(DType d);                         // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offset into the data region
  uint64_t end = 0;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the file is open
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes())}; }
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the whole header. Errors name the file, the tensor and the rule.
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Validates an in-memory buffer (the buffer must outlive the object); used by the fuzzer and tests.
  static Expected<std::unique_ptr<SafetensorsFile>> parse(std::span<const uint8_t> buf, std::string label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by begin offset
  const TensorInfo* find(std::string_view name) const;                  // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
  friend struct SafetensorsParser;
};

// Streaming writer: declare every tensor first (name, dtype, shape), then write each tensor's bytes in
// declaration order. The header is written up front, so memory stays bounded by one tensor.
class SafetensorsWriter {
 public:
  struct Decl {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  // Writes to `path`.tmp and renames to `path` on finish(), so a crash never leaves a valid-looking file.
  static Expected<std::unique_ptr<SafetensorsWriter>> create(const std::string& path, std::vector<Decl> decls,
                                                             std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  // Appends the next declared tensor's bytes; may be called several times per tensor (chunks).
  Status write(std::span<const uint8_t> bytes);
  Status finish();  // checks every declared byte was written, fsyncs, renames into place

 private:
  SafetensorsWriter() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gridq::io
