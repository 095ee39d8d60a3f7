// S6 + S7 (quantizer.md §2): the artifact writer. Encoded Linears become the tensors format.md §9/§12 names
// (routed experts in a CB format stacked into `…experts.gate_up_proj.cb_qweight` [E, 2I, C/256·ts], gate rows
// first, and `…experts.down_proj.cb_qweight`; FP8 W8A8 `weight` + `weight_scale` [R, 1]; passthrough under
// the source names and dtypes). One safetensors shard per decoder layer plus one for the rest, then the
// index, config.json with the quantization_config stub, quant_config.json (one group per format, `ignore`
// naming every passthrough module exactly, provenance), cb_codebooks.pqcb, the tokenizer/template files, and
// last PINS.json. Nothing here writes a timestamp or a timing, so the same inputs give the same bytes.
//
//   auto content = assemble_tensors(std::move(encoded));           // one layer
//   auto sha = write_shard(dir + "/" + shard_file_name(l, n), content->tensors);
//   ... every shard ...
//   write_artifact_metadata(dir, info);                            // index, configs, sidecar, copies
//   verify_artifact(dir, slices);                                  // S7: Artifact::open + bit-exact decode
//   finalize_artifact(dir, out, overwrite);                        // PINS.json, rename OUT.partial -> OUT
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gridbook/codec.h"
#include "gridbook/quant_config.h"
#include "gridbook/sidecar.h"
#include "io/safetensors.h"
#include "quant/encode_tensor.h"

namespace gridq::quant {

// One tensor as it will be stored. `owned` holds the bytes, or `view` points at bytes owned elsewhere (an
// mmapped staging file) when `owned` is empty.
struct StoredTensor {
  std::string name;
  io::DType dtype = io::DType::U8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> owned;
  std::span<const uint8_t> view;
  std::span<const uint8_t> bytes() const { return owned.empty() ? view : std::span<const uint8_t>(owned); }
};

// Where one CB Linear's rows live in the artifact, and the digest of the Ŵ its encoder meant: S7 decodes
// those rows from the stored bytes and compares (quantizer.md §2 S7: "bit for bit").
struct CbSlice {
  std::string source;        // source tensor name
  std::string tensor;        // stored cb_qweight tensor
  std::string scale_tensor;  // FP8-CB weight_scale, else empty
  int64_t row0 = 0;          // first row, counting rows of all experts of a stack ([E, rows] flattened)
  int64_t rows = 0, cols = 0;
  std::string rung;          // rung name
  std::string w_hat_sha256;  // w_hat_bf16_sha256 of the encoder's Ŵ
  nlohmann::json to_json() const;
  static Expected<CbSlice> from_json(const nlohmann::json& j);
};

struct ShardContent {
  std::vector<StoredTensor> tensors;  // sorted by name
  std::vector<CbSlice> cb_slices;     // in source-name order
};

// The stored tensors of a set of encoded Linears (one decoder layer, or the non-layer rest). Routed experts
// (`<p>.experts.<e>.{gate,up,down}_proj.weight`) in a CB format are stacked: every expert 0..E-1 must be
// present with all three roles in one rung, and gate/up must have the same shape. Everything else keeps one
// tensor set per source tensor. Consumes the encodings' buffers.
Expected<ShardContent> assemble_tensors(std::vector<EncodedTensor> encoded);

// "model-00001-of-00005.safetensors" for index 0 of 5.
std::string shard_file_name(int index, int count);

// Writes a safetensors file (tensors in the given order, metadata {"format": "pt"}) through the atomic
// streaming writer and returns the file's SHA-256.
Expected<std::string> write_shard(const std::string& path, const std::vector<StoredTensor>& tensors);

// Everything the metadata files need besides the shards.
struct ExportInfo {
  std::string source_dir;                                // tokenizer/template files are copied from here
  nlohmann::json source_config;                          // config.json of the source (gets the stub)
  std::vector<std::string> shard_files;                  // in order; every one already written in the dir
  std::map<std::string, std::string> tensor_formats;     // source tensor name -> final format
  std::map<std::string, gridbook::Codebook> codebooks;   // book_keys.h key -> book, for every CB format used
  std::string codebook_source = "lattice";               // lattice | learned | learned-per-layer
  nlohmann::json provenance = nlohmann::json::object();  // recipe, calibration, plan, stats, … (no times)
};

// The quant_config.json gridq writes for `info` (groups, ignore, provenance incl. codebook_sha256), and the
// sidecar tables. Group names: lower-case rung names ("nvfp4_cb_k16") and "fp8_dynamic"; targets are exact
// module names, sorted. Refuses a format it cannot express.
struct QuantConfigOut {
  gridbook::QuantConfig config;
  std::vector<gridbook::CodebookTable> tables;
};
Expected<QuantConfigOut> build_quant_config(const ExportInfo& info);

// The module a source tensor belongs to in the artifact: "<m>" for "<m>.weight", the name itself for bare
// parameters; routed experts in CB formats map to their stack "<p>.experts.gate_up_proj" / ".down_proj".
std::string artifact_module_name(const std::string& source_tensor, const std::string& format);

// Writes model.safetensors.index.json (from the shards' headers), config.json, quant_config.json,
// cb_codebooks.pqcb (when a CB format is used) and copies the tokenizer / chat template / generation config
// files that exist in the source directory.
Status write_artifact_metadata(const std::string& dir, const ExportInfo& info);

// S7: gridbook::Artifact::open (every reader check: containers, config, schemes, coverage, books, digests,
// scale-plane legality) and, for every CB slice, decoding its stored rows reproduces the encoder's Ŵ bit for
// bit. Returns the reader's check lines plus one for the decode comparison.
Expected<std::vector<std::string>> verify_artifact(const std::string& dir,
                                                   const std::vector<CbSlice>& slices);

// PINS.json last, then the atomic rename `partial_dir` -> `out_dir` (an existing out_dir is removed first
// only when `overwrite`; otherwise refused).
Status finalize_artifact(const std::string& partial_dir, const std::string& out_dir, bool overwrite);

}  // namespace gridq::quant
