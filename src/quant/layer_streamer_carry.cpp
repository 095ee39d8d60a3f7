// The carry between layers (capture.h LayerStreamer::save_carry / load_carry / carry_sha256): the input of
// the next layer, written so a killed quantize resumes at the last finished layer with the same bytes.
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/sha256.h"
#include "quant/layer_streamer_impl.h"

namespace gridq::quant {

namespace {
constexpr char kCarryMagic[8] = {'G', 'Q', 'C', 'A', 'R', 'R', 'Y', '1'};
}  // namespace

std::string LayerStreamer::carry_sha256() const {
  const auto& c = impl_->carry;
  return io::sha256_hex({reinterpret_cast<const uint8_t*>(c.data()), c.size() * sizeof(float)});
}

// Carry file: magic[8], int32 next_layer, int32 reserved (0), int64 n_tok, int64 H, then fp32 [n_tok, H];
// all little-endian (the only byte order gridq builds for).
Status LayerStreamer::save_carry(const std::string& path) const {
  static_assert(std::endian::native == std::endian::little, "carry files are little-endian");
  const Impl& I = *impl_;
  const int32_t layer = I.next, reserved = 0;
  const int64_t n_tok = I.n_tok(), H = I.lm.spec.hidden_size;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("carry {}: cannot create", tmp);
    f.write(kCarryMagic, sizeof(kCarryMagic));
    f.write(reinterpret_cast<const char*>(&layer), 4);
    f.write(reinterpret_cast<const char*>(&reserved), 4);
    f.write(reinterpret_cast<const char*>(&n_tok), 8);
    f.write(reinterpret_cast<const char*>(&H), 8);
    f.write(reinterpret_cast<const char*>(I.carry.data()),
            static_cast<std::streamsize>(I.carry.size() * sizeof(float)));
    f.flush();
    if (!f) return err("carry {}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err("carry {}: rename from {} failed: {}", path, tmp, ec.message());
  return {};
}

Status LayerStreamer::load_carry(const std::string& path, int next_layer) {
  Impl& I = *impl_;
  const int64_t want_tok = I.n_tok(), want_h = I.lm.spec.hidden_size;
  if (next_layer < 0 || next_layer > num_layers())
    return err("carry {}: next_layer {} outside [0, {}]", path, next_layer, num_layers());
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("carry {}: cannot open", path);
  char magic[8];
  int32_t layer = -1, reserved = -1;
  int64_t n_tok = -1, H = -1;
  f.read(magic, 8);
  f.read(reinterpret_cast<char*>(&layer), 4);
  f.read(reinterpret_cast<char*>(&reserved), 4);
  f.read(reinterpret_cast<char*>(&n_tok), 8);
  f.read(reinterpret_cast<char*>(&H), 8);
  if (!f || std::memcmp(magic, kCarryMagic, 8) != 0)
    return err("carry {}: not a gridq carry file (bad magic)", path);
  if (layer != next_layer)
    return err("carry {}: holds the input of layer {}, not {}", path, layer, next_layer);
  if (n_tok != want_tok || H != want_h)
    return err("carry {}: shape [{}, {}] but the calibration set and model need [{}, {}]", path, n_tok, H,
               want_tok, want_h);
  std::vector<float> c(static_cast<size_t>(n_tok * H));
  f.read(reinterpret_cast<char*>(c.data()), static_cast<std::streamsize>(c.size() * sizeof(float)));
  if (!f) return err("carry {}: truncated (expected {} bytes of data)", path, c.size() * sizeof(float));
  if (f.peek() != std::char_traits<char>::eof()) return err("carry {}: trailing bytes after the data", path);
  I.carry = std::move(c);
  I.next = next_layer;
  I.failed = false;
  return {};
}

}  // namespace gridq::quant
