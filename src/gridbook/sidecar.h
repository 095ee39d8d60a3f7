// The codebook sidecar cb_codebooks.pqcb (format.md §10): a safetensors file of FP16 tables
// `cb_codebook.<ref>.<fmt>.sub{i}` [2^{b_i}, 8/n_sub], plus the provenance digests that bind them to
// quant_config.json. The file is read into memory once; the digests are computed over exactly the bytes
// that are later decoded, so a file swapped between "check" and "use" cannot pass.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gridbook/rung.h"

namespace gridq::gridbook {

struct CodebookTable {
  std::string name;
  int64_t rows = 0;           // 2^{b_i}
  int64_t cols = 0;           // 8 / n_sub
  std::vector<uint16_t> f16;  // [rows, cols] FP16 bits, C order
  std::string sha256;         // SHA-256 of the raw little-endian FP16 bytes (64 lowercase hex)
};

// "cb_codebook.<ref>.<fmt>.sub<i>" for product mode.
std::string codebook_table_name(std::string_view ref, const Rung& rung, int sub);

// SHA-256 (hex) of a table's FP16 bytes as stored: C order, little-endian, no framing (format.md §10).
std::string codebook_digest(std::span<const uint16_t> f16);

class Sidecar {
 public:
  // Reads `path` once and parses it as safetensors; every tensor must be F16 and 2-D.
  static Expected<Sidecar> read(const std::string& path);
  // Same from an in-memory copy of the file (tests, fuzzing).
  static Expected<Sidecar> parse(std::vector<uint8_t> bytes, const std::string& label);

  const std::vector<CodebookTable>& tables() const { return tables_; }
  const CodebookTable* find(std::string_view name) const;
  const std::string& label() const { return label_; }

 private:
  std::string label_;
  std::vector<CodebookTable> tables_;  // sorted by name
};

// Writes a sidecar with the given tables (sorted by name; shapes from rows/cols). Deterministic.
Status write_sidecar(const std::string& path, const std::vector<CodebookTable>& tables);

// Provenance check (format.md §10): when `digests` is present, its names must equal the sidecar's names
// exactly (missing or unbound extras refused) and every digest must match.
Status verify_codebook_provenance(const std::optional<std::map<std::string, std::string>>& digests,
                                  const Sidecar& sidecar);

// The mapping gridq writes into provenance.codebook_sha256.
std::map<std::string, std::string> codebook_digests(const std::vector<CodebookTable>& tables);

}  // namespace gridq::gridbook
