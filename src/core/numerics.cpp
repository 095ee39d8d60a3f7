// Narrowing conversions for the formats of numerics.h. One integer RNE routine serves FP16, E4M3 and E2M1:
// they differ only in mantissa width, minimum normal exponent and saturation.
#include "core/numerics.h"

#include <algorithm>

namespace gridq {
namespace {

// Rounds a finite non-negative FP32 magnitude (bit pattern `abs`) RNE to a binary format with `man_bits`
// explicit mantissa bits, minimum normal exponent `emin` and exponent bias 1 - emin, and returns the
// format's bit pattern without sign. Overflow is the caller's concern (the result may exceed the format).
// A mantissa carry moves into the exponent field by plain addition, which is what RNE requires.
uint32_t round_to_small_format(uint32_t abs, int man_bits, int emin) {
  if (abs == 0) return 0;
  uint32_t exp_field = abs >> 23;
  uint64_t mant;
  int exp;
  if (exp_field == 0) {  // FP32 subnormal
    mant = abs & 0x7FFFFFu;
    exp = -126;
  } else {
    mant = (abs & 0x7FFFFFu) | 0x800000u;
    exp = static_cast<int>(exp_field) - 127;
  }
  // value = mant · 2^(exp-23); the quantum at this magnitude is 2^(max(exp, emin) - man_bits).
  int shift = 23 - man_bits + std::max(0, emin - exp);
  if (shift > 40) return 0;  // below a quarter quantum
  uint64_t q = mant >> shift;
  uint64_t rem = mant & ((uint64_t{1} << shift) - 1);
  uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  // Normal results carry the implicit bit in q, which adds the missing +1 to the biased exponent.
  uint64_t bits = (static_cast<uint64_t>(std::max(0, exp - emin)) << man_bits) + q;
  return static_cast<uint32_t>(std::min<uint64_t>(bits, 0xFFFFFFFFu));
}

}  // namespace

uint16_t f32_to_f16(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
  if (abs == 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u);
  uint32_t bits = round_to_small_format(abs, 10, -14);
  if (bits >= 0x7C00u) bits = 0x7C00u;  // overflow (>= 65520 after rounding) -> inf
  return static_cast<uint16_t>(sign | bits);
}

uint8_t f32_to_e4m3_rne(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0x7F;
  constexpr uint32_t kMax448 = 0x43E00000u;  // 448.0f
  if (abs >= kMax448) return static_cast<uint8_t>(sign | 0x7Eu);
  return static_cast<uint8_t>(sign | round_to_small_format(abs, 3, -6));
}

uint8_t f32_to_e4m3_sat(float f) {
  if (f != f) return 0x7F;
  float c = std::clamp(f, -448.0f, 448.0f);
  return f32_to_e4m3_rne(c);
}

uint8_t f32_to_e2m1_rne(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  uint8_t sign = static_cast<uint8_t>((b >> 28) & 0x8u);
  uint32_t abs = b & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return 0;
  constexpr uint32_t kMax6 = 0x40C00000u;  // 6.0f
  if (abs >= kMax6) return static_cast<uint8_t>(sign | 0x7u);
  return static_cast<uint8_t>(sign | round_to_small_format(abs, 1, 0));
}

}  // namespace gridq
