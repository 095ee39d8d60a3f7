#include "runtime/cuda/relayout.h"

#include <cstring>

namespace gridq::cuda {
namespace {

int cb_type_size(int k, int v) { return 4 * k + (v == 2 ? 9 : 16); }

Status check_cb(int k, int v, int rows, int in, size_t bytes, const char* what) {
  if (k < 12 || k > 24 || (k % 2) != 0)
    return err("{}: NVFP4-CB k={} has no CUDA kernel (k must be even, 12..24)", what, k);
  if (v != 1 && v != 2) return err("{}: layout_version {} is not 1 or 2", what, v);
  if (rows <= 0 || rows % kTileRows != 0)
    return err("{}: rows {} is not a positive multiple of 16", what, rows);
  if (in <= 0 || in % 256 != 0) return err("{}: in {} is not a positive multiple of 256", what, in);
  size_t want = static_cast<size_t>(rows) * static_cast<size_t>(in / 256) * cb_type_size(k, v);
  if (bytes != want) return err("{}: {} bytes, expected {} for [{}, {}]", what, bytes, want, rows, in);
  return {};
}

// Calls f(canonical_offset, tiled_offset, nbytes) for every contiguous run the CB re-layout moves.
template <typename F>
void cb_map(int k, int v, int rows, int in, F&& f) {
  const int ts = cb_type_size(k, v);
  const int S = in / 256;
  const size_t ub = static_cast<size_t>(cb_unit_bytes(k, v));
  const int n16 = k / 16, n4 = (k % 16) / 4;
  for (int rt = 0; rt < rows / kTileRows; ++rt) {
    for (int s = 0; s < S; ++s) {
      const size_t unit = (static_cast<size_t>(rt) * S + s) * ub;
      for (int h = 0; h < 2; ++h) {
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const int row = rt * kTileRows + g + 8 * h;
          const size_t sb = (static_cast<size_t>(row) * S + s) * ts;
          const size_t rec = sb + static_cast<size_t>(t) * k;
          for (int p = 0; p < n16; ++p) f(rec + 16 * p, unit + (p * 2 + h) * 512 + lane * 16, 16);
          for (int q = 0; q < n4; ++q)
            f(rec + 16 * n16 + 4 * q, unit + n16 * 1024 + (q * 2 + h) * 128 + lane * 4, 4);
          const size_t plane = sb + 4 * k;
          const size_t sc = unit + 64 * k;
          if (v == 2) {
            f(plane + 1 + 2 * t, sc + (h * 32 + lane) * 2, 2);
            if (t == 0) f(plane, sc + 128 + h * 8 + g, 1);
          } else {
            f(plane + 4 * t, sc + (h * 32 + lane) * 4, 4);
          }
        }
      }
    }
  }
}

template <typename T, typename F>
void dense_map(int rows, int in, int piece_elems, int pieces_per_half, F&& f) {
  // unit = 16 rows × 64 K; lane (g,t) owns K [16t, 16t+16) of rows g and g+8, split in pieces.
  const int S = in / kDenseUnitK;
  const size_t unit_elems = static_cast<size_t>(kTileRows) * kDenseUnitK;
  for (int rt = 0; rt < rows / kTileRows; ++rt)
    for (int s = 0; s < S; ++s) {
      const size_t unit = (static_cast<size_t>(rt) * S + s) * unit_elems;
      for (int h = 0; h < 2; ++h)
        for (int p = 0; p < pieces_per_half; ++p)
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            const size_t row = static_cast<size_t>(rt) * kTileRows + g + 8 * h;
            const size_t src = row * in + static_cast<size_t>(s) * kDenseUnitK + 16 * t + piece_elems * p;
            const size_t dst =
                unit + (static_cast<size_t>(h * pieces_per_half + p) * 32 + lane) * piece_elems;
            f(src, dst, piece_elems);
          }
    }
}

Status check_dense(int rows, int in, size_t elems, const char* what) {
  if (rows <= 0 || rows % kTileRows != 0)
    return err("{}: rows {} is not a positive multiple of 16", what, rows);
  if (in <= 0 || in % kDenseUnitK != 0) return err("{}: in {} is not a positive multiple of 64", what, in);
  if (elems != static_cast<size_t>(rows) * in)
    return err("{}: {} elements, expected {} for [{}, {}]", what, elems, static_cast<size_t>(rows) * in, rows,
               in);
  return {};
}

}  // namespace

int cb_unit_bytes(int k, int layout_version) { return kTileRows * cb_type_size(k, layout_version); }

Expected<std::vector<uint8_t>> cb_relayout(int k, int v, int rows, int in,
                                           std::span<const uint8_t> canonical) {
  GRIDQ_RETURN_IF_ERROR(check_cb(k, v, rows, in, canonical.size(), "cb_relayout"));
  std::vector<uint8_t> out(canonical.size());
  cb_map(k, v, rows, in, [&](size_t c, size_t t, size_t n) { std::memcpy(&out[t], &canonical[c], n); });
  return out;
}

Expected<std::vector<uint8_t>> cb_relayout_inverse(int k, int v, int rows, int in,
                                                   std::span<const uint8_t> tiled) {
  GRIDQ_RETURN_IF_ERROR(check_cb(k, v, rows, in, tiled.size(), "cb_relayout_inverse"));
  std::vector<uint8_t> out(tiled.size());
  cb_map(k, v, rows, in, [&](size_t c, size_t t, size_t n) { std::memcpy(&out[c], &tiled[t], n); });
  return out;
}

Expected<std::vector<uint8_t>> fp8_relayout(int rows, int in, std::span<const uint8_t> canonical) {
  GRIDQ_RETURN_IF_ERROR(check_dense(rows, in, canonical.size(), "fp8_relayout"));
  std::vector<uint8_t> out(canonical.size());
  dense_map<uint8_t>(rows, in, 16, 1,
                     [&](size_t c, size_t t, size_t n) { std::memcpy(&out[t], &canonical[c], n); });
  return out;
}

Expected<std::vector<uint8_t>> fp8_relayout_inverse(int rows, int in, std::span<const uint8_t> tiled) {
  GRIDQ_RETURN_IF_ERROR(check_dense(rows, in, tiled.size(), "fp8_relayout_inverse"));
  std::vector<uint8_t> out(tiled.size());
  dense_map<uint8_t>(rows, in, 16, 1,
                     [&](size_t c, size_t t, size_t n) { std::memcpy(&out[c], &tiled[t], n); });
  return out;
}

Expected<std::vector<uint16_t>> bf16_relayout(int rows, int in, std::span<const uint16_t> canonical) {
  GRIDQ_RETURN_IF_ERROR(check_dense(rows, in, canonical.size(), "bf16_relayout"));
  std::vector<uint16_t> out(canonical.size());
  dense_map<uint16_t>(rows, in, 8, 2,
                      [&](size_t c, size_t t, size_t n) { std::memcpy(&out[t], &canonical[c], n * 2); });
  return out;
}

Expected<std::vector<uint16_t>> bf16_relayout_inverse(int rows, int in, std::span<const uint16_t> tiled) {
  GRIDQ_RETURN_IF_ERROR(check_dense(rows, in, tiled.size(), "bf16_relayout_inverse"));
  std::vector<uint16_t> out(tiled.size());
  dense_map<uint16_t>(rows, in, 8, 2,
                      [&](size_t c, size_t t, size_t n) { std::memcpy(&out[c], &tiled[t], n * 2); });
  return out;
}

}  // namespace gridq::cuda
