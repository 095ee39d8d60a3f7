// Scale-plane coding for fp4 rungs. The legal (E, c) set and the compose table are computed from the
// definition (exact E4M3 round trip), never typed in, so the tests' expected counts are independent checks.
#include "gridbook/scale_coding.h"

#include <algorithm>
#include <cmath>

#include "core/numerics.h"

namespace gridq::gridbook {
namespace {

struct V2Tables {
  std::array<float, 4096> compose{};
  std::array<bool, 4096> legal{};
};

const V2Tables& tables() {
  static const V2Tables t = [] {
    V2Tables v;
    for (int E = 0; E < 256; ++E) {
      for (int c = 0; c < 16; ++c) {
        // Float64 product then one rounding to FP32, as gridbook's build_compose_table does; exact for legal
        // pairs, and E = 255 is the E8M0 NaN so its row is NaN.
        double d = static_cast<double>(kV2Table[static_cast<size_t>(c)]) * std::ldexp(1.0, E - 127);
        float f = E == 255 ? std::nanf("") : static_cast<float>(d);
        size_t i = static_cast<size_t>(E * 16 + c);
        v.compose[i] = f;
        bool exact_f32 = static_cast<double>(f) == d;
        bool e4m3_exact = f > 0.0f && f <= 448.0f && e4m3_to_f32(f32_to_e4m3_rne(f)) == f;
        v.legal[i] = E != 255 && exact_f32 && e4m3_exact;
      }
    }
    return v;
  }();
  return t;
}

}  // namespace

float v2_scale(uint8_t E, int c) {
  return tables().compose[static_cast<size_t>(E) * 16 + static_cast<size_t>(c & 15)];
}

bool v2_legal(uint8_t E, int c) {
  if (c < 0 || c > 15) return false;
  return tables().legal[static_cast<size_t>(E) * 16 + static_cast<size_t>(c)];
}

const std::array<float, 4096>& v2_compose_table() { return tables().compose; }

int v2_lowest_legal_code(uint8_t E) {
  for (int c = 0; c < 16; ++c)
    if (v2_legal(E, c)) return c;
  return -1;
}

int v2_snap_up(uint8_t E, float ideal) {
  // T is increasing, so the first legal code at or above `ideal` is the smallest reachable scale >= ideal.
  for (int c = 0; c < 16; ++c)
    if (v2_legal(E, c) && v2_scale(E, c) >= ideal) return c;
  return -1;
}

V2Plane v2_plane_round_up(std::span<const float, kFp4Groups> ideal) {
  V2Plane p;
  float amax = 0.0f;
  for (float s : ideal) amax = std::max(amax, s);  // fixed order; max is order-independent anyway
  if (amax == 0.0f) return p;                      // E = 118, all codes 0
  amax = std::min(amax, 448.0f);
  int E = 0;
  for (E = 0; E < 255; ++E) {
    if (v2_snap_up(static_cast<uint8_t>(E), amax) >= 0) break;
  }
  p.E = static_cast<uint8_t>(E);  // 448 = v2_scale(135, 6) is legal, so the loop always stops by E = 135
  for (size_t g = 0; g < kFp4Groups; ++g)
    p.c[g] = static_cast<uint8_t>(v2_snap_up(p.E, std::min(ideal[g], 448.0f)));
  return p;
}

V2Plane read_v2_plane(const uint8_t* plane9) {
  V2Plane p;
  p.E = plane9[0];
  for (int g = 0; g < kFp4Groups; ++g) {
    uint8_t b = plane9[1 + g / 2];
    p.c[static_cast<size_t>(g)] = (g % 2 == 0) ? (b & 0xF) : (b >> 4);
  }
  return p;
}

void write_v2_plane(const V2Plane& p, uint8_t* plane9) {
  plane9[0] = p.E;
  for (int g = 0; g < kFp4Groups; g += 2) {
    plane9[1 + g / 2] = static_cast<uint8_t>((p.c[static_cast<size_t>(g)] & 0xF) |
                                             ((p.c[static_cast<size_t>(g + 1)] & 0xF) << 4));
  }
}

Status check_v1_plane(const uint8_t* plane16, std::string_view where) {
  for (int g = 0; g < kFp4Groups; ++g) {
    uint8_t b = plane16[g];
    if ((b & 0x7F) == 0x7F) return err("{}: v1 scale byte of group {} is 0x{:02X}, an E4M3 NaN", where, g, b);
    if (b & 0x80)
      return err("{}: v1 scale byte of group {} is 0x{:02X}, sign bit set (scales must be >= 0)", where, g,
                 b);
  }
  return {};
}

Status check_v2_plane(const uint8_t* plane9, std::string_view where) {
  V2Plane p = read_v2_plane(plane9);
  for (int g = 0; g < kFp4Groups; ++g) {
    int c = p.c[static_cast<size_t>(g)];
    if (!v2_legal(p.E, c))
      return err(
          "{}: v2 scale pair (E = {}, c = {}) of group {} is illegal ({}·2^({}-127) is not an E4M3 value in "
          "(0, 448])",
          where, p.E, c, g, kV2Table[static_cast<size_t>(c)], p.E);
  }
  return {};
}

void superblock_scales_fp4(const Rung& r, const uint8_t* sb, float scales[kFp4Groups]) {
  const uint8_t* plane = sb + r.index_bytes();
  if (r.layout_version == 2) {
    const float* row = v2_compose_table().data() + static_cast<size_t>(plane[0]) * 16;
    for (int g = 0; g < kFp4Groups; g += 2) {
      uint8_t b = plane[1 + g / 2];
      scales[g] = row[b & 0xF];
      scales[g + 1] = row[b >> 4];
    }
  } else {
    for (int g = 0; g < kFp4Groups; ++g) scales[g] = e4m3_to_f32(plane[g]);
  }
}

Status check_scale_planes(const Rung& r, std::span<const uint8_t> qweight, std::string_view tensor) {
  if (r.grid != Grid::FP4) return {};
  const size_t ts = static_cast<size_t>(r.type_size());
  if (qweight.size() % ts != 0)
    return err("{}: {} bytes is not a whole number of {}-byte {} superblocks", tensor, qweight.size(), ts,
               r.name());
  const size_t n_sb = qweight.size() / ts;
  for (size_t s = 0; s < n_sb; ++s) {
    const uint8_t* plane = qweight.data() + s * ts + static_cast<size_t>(r.index_bytes());
    bool bad = false;
    if (r.layout_version == 2) {
      for (int g = 0; g < kFp4Groups && !bad; ++g) {
        uint8_t b = plane[1 + g / 2];
        bad = !v2_legal(plane[0], g % 2 == 0 ? (b & 0xF) : (b >> 4));
      }
    } else {
      for (int g = 0; g < kFp4Groups && !bad; ++g) bad = (plane[g] & 0x80) || (plane[g] & 0x7F) == 0x7F;
    }
    if (bad) {
      // Only the failing superblock pays for the formatted message.
      std::string where = fmt::format("{} superblock {} (byte offset {})", tensor, s, s * ts);
      return r.layout_version == 2 ? check_v2_plane(plane, where) : check_v1_plane(plane, where);
    }
  }
  return {};
}

}  // namespace gridq::gridbook
