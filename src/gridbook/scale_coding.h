// FP4 scale planes (format.md §6): v1 = 16 E4M3 bytes; v2 = two-tier, one E8M0 super exponent E plus 16
// four-bit codes c_g, scale_g = T[c_g] · 2^(E−127) with the default table T4_2oct8m. Only pairs whose scale
// is exactly an E4M3 value in (0, 448] are legal; the legal set is enumerated once at first use.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"
#include "gridbook/rung.h"

namespace gridq::gridbook {

// T4_2oct8m: entry c = 8i + j is (1 + j/8)·2^i. Every entry is exact E4M3.
inline constexpr std::array<float, 16> kV2Table = {1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f,
                                                   2.0f, 2.25f,  2.5f,  2.75f,  3.0f, 3.25f,  3.5f,  3.75f};

// An all-zero superblock stores this E with all codes 0 (E = 117 has no legal code 0). gridq's reading of the
// spec's "smallest legal E with codes 0"; to be confirmed against producer output.
inline constexpr uint8_t kV2ZeroSuperblockE = 118;

float v2_scale(uint8_t E, int c);  // T[c]·2^(E−127) in FP32 (exact for every legal pair)
bool v2_legal(uint8_t E, int c);
const std::array<float, 4096>& v2_compose_table();  // [256 E, 16 c]: entry E·16 + c = v2_scale(E, c)
int v2_lowest_legal_code(uint8_t E);                // -1 when E has no legal code
// Smallest legal code c for E with v2_scale(E, c) >= ideal; a group below the reachable set therefore snaps
// up to the smallest reachable scale (never clips). -1 when ideal is above every legal scale of E or E has
// none. ideal <= 0 (an all-zero group) gives the lowest legal code.
int v2_snap_up(uint8_t E, float ideal);

struct V2Plane {
  uint8_t E = kV2ZeroSuperblockE;
  std::array<uint8_t, kFp4Groups> c{};
};

// Reference writer policy: the smallest E whose largest legal scale reaches max(ideal), then v2_snap_up per
// group (all-zero groups take the lowest legal code). An all-zero superblock gives E = 118, codes 0. Ideal
// scales above 448 are first clamped to 448. Deterministic. Precondition: ideal values finite and >= 0.
V2Plane v2_plane_round_up(std::span<const float, kFp4Groups> ideal);

// Plane byte layout: byte 0 = E; byte 1 + g/2 holds c_g, even g in the low nibble.
V2Plane read_v2_plane(const uint8_t* plane9);
void write_v2_plane(const V2Plane& p, uint8_t* plane9);

// v1: refuses NaN bytes (0x7F/0xFF) and bytes with the sign bit set. v2: refuses illegal (E, c) pairs.
// `where` names the tensor/row/superblock in the error message.
Status check_v1_plane(const uint8_t* plane16, std::string_view where);
Status check_v2_plane(const uint8_t* plane9, std::string_view where);

// The 16 group scales of a checked fp4 superblock `sb` (index stream then plane) as FP32.
void superblock_scales_fp4(const Rung& r, const uint8_t* sb, float scales[kFp4Groups]);

// Checks every plane of an fp4 tensor `qweight` (a whole number of superblocks back to back); no-op for fp8.
Status check_scale_planes(const Rung& r, std::span<const uint8_t> qweight, std::string_view tensor);

}  // namespace gridq::gridbook
