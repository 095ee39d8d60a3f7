// The last steps of an export (export.h): every file of a finished artifact checked against its pins and
// decoded, then the partial directory moved into place.
#include <filesystem>
#include <set>

#include "gridbook/artifact.h"
#include "io/pins.h"
#include "io/sha256.h"
#include "quant/export.h"

namespace gridq::quant {

namespace fs = std::filesystem;

Expected<std::vector<std::string>> verify_artifact(const std::string& dir,
                                                   const std::vector<CbSlice>& slices) {
  auto art_or = gridbook::Artifact::open(dir);
  if (!art_or.ok()) return err("S7: the written artifact does not validate: {}", art_or.message());
  const gridbook::Artifact& art = **art_or;
  std::vector<std::string> checks = art.checks();
  int64_t weights = 0;
  for (const CbSlice& s : slices) {
    const io::TensorInfo* t = art.tensor(s.tensor);
    if (!t) return err("S7: tensor '{}' of '{}' is not in the artifact", s.tensor, s.source);
    const std::string module = s.tensor.substr(0, s.tensor.size() - std::string(".cb_qweight").size());
    const gridbook::ModuleInfo* m = art.find_module(module);
    if (!m || !m->rung || !art.codebook(*m))
      return err("S7: '{}' is not a codebook module of the artifact", module);
    if (m->rung->name() != s.rung)
      return err("S7: '{}' is stored as {} but '{}' was encoded as {}", module, m->rung->name(), s.source,
                 s.rung);
    const int64_t rb = gridbook::row_bytes(*m->rung, s.cols);
    const auto all = t->bytes();
    if (t->shape.back() != rb || static_cast<uint64_t>((s.row0 + s.rows) * rb) > all.size())
      return err("S7: rows [{}, {}) of '{}' are outside the tensor", s.row0, s.row0 + s.rows, s.tensor);
    std::vector<float> scale;
    if (!s.scale_tensor.empty()) {
      const io::TensorInfo* st = art.tensor(s.scale_tensor);
      if (!st || st->dtype != io::DType::F32 || static_cast<uint64_t>(s.row0 + s.rows) * 4 > st->nbytes())
        return err("S7: scale tensor '{}' of '{}' is missing or too small", s.scale_tensor, s.source);
      scale.resize(static_cast<size_t>(s.rows));
      std::memcpy(scale.data(), st->data + s.row0 * 4, scale.size() * 4);
    }
    std::vector<uint16_t> bf(static_cast<size_t>(s.rows * s.cols));
    const std::vector<int64_t> shape = {s.rows, rb};
    GRIDQ_RETURN_IF_ERROR(gridbook::decode_tensor(
        *m->rung, *art.codebook(*m), s.tensor,
        all.subspan(static_cast<size_t>(s.row0 * rb), static_cast<size_t>(s.rows * rb)), shape, s.cols, scale,
        bf));
    std::vector<uint8_t> le(bf.size() * 2);
    for (size_t i = 0; i < bf.size(); ++i) {
      le[2 * i] = static_cast<uint8_t>(bf[i] & 0xFF);
      le[2 * i + 1] = static_cast<uint8_t>(bf[i] >> 8);
    }
    if (io::sha256_hex(le) != s.w_hat_sha256)
      return err(
          "S7: decoding '{}' rows [{}, {}) does not reproduce the encoder's weights for '{}' (BF16 digest "
          "mismatch); the packed bytes are wrong",
          s.tensor, s.row0, s.row0 + s.rows, s.source);
    weights += s.rows * s.cols;
  }
  checks.push_back(
      fmt::format("reconstruction: {} CB Linear(s), {} weights decode bit-exactly to the encoder's W_hat",
                  slices.size(), weights));
  return checks;
}

Status finalize_artifact(const std::string& partial_dir, const std::string& out_dir, bool overwrite) {
  GRIDQ_RETURN_IF_ERROR(io::write_pins(partial_dir));
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    if (!overwrite) return err("{}: already exists (pass --overwrite to replace it)", out_dir);
    fs::remove_all(out_dir, ec);
    if (ec) return err("{}: cannot remove the old output: {}", out_dir, ec.message());
  }
  fs::rename(partial_dir, out_dir, ec);
  if (ec) return err("cannot rename {} to {}: {}", partial_dir, out_dir, ec.message());
  return Status();
}

}  // namespace gridq::quant
