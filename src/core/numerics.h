// Scalar number formats used by gridbook artifacts and the activation contracts (format.md §2):
// BF16, FP16, E4M3 (float8_e4m3fn), E2M1 (FP4) and E8M0. Every narrowing conversion is one exact
// round-to-nearest-even (RNE) on the FP32 input, done with integer arithmetic so the result does not depend
// on the FPU rounding mode or on compiler contraction.
//
// Saturation policy (documented because the formats differ):
//  - f32_to_bf16 / f32_to_f16: IEEE behaviour, overflow -> ±inf, NaN stays a quiet NaN.
//  - f32_to_e4m3_rne: RNE, and every |x| > 448 (including ±inf) saturates to ±448 ("satfinite"); NaN -> 0x7F.
//    E4M3 has no infinity, and no gridq contract wants an overflow to become NaN.
//  - f32_to_e4m3_sat: clamps to [-448, 448] first, then RNE. It equals f32_to_e4m3_rne for every input; it
//    is kept as a separate name because format.md §14.2 states the clamp explicitly.
//  - f32_to_e2m1_rne: RNE, |x| > 6 saturates to ±6; NaN -> +0 (E2M1 has no NaN; callers must not pass NaN).
// Signs of zero are kept by every conversion (-0 -> 0x8000 / 0x80 / code 8).
#pragma once

#include <bit>
#include <cstdint>

namespace gridq {

// ---- BF16 ----------------------------------------------------------------------------------------

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncation could turn a NaN with only low payload bits into inf; setting the quiet bit keeps it NaN.
    return static_cast<uint16_t>((b >> 16) | 0x0040u);
  }
  uint32_t bias = 0x7FFFu + ((b >> 16) & 1u);  // ties to even; a carry into the exponent rounds up correctly
  return static_cast<uint16_t>((b + bias) >> 16);
}

// bf16_rn(x): one RNE rounding of an FP32 value to BF16, returned as FP32.
inline float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- FP16 ----------------------------------------------------------------------------------------

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));  // inf / NaN (payload kept)
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
  // Subnormal: man * 2^-24, exact in FP32.
  float v = static_cast<float>(man) * 0x1p-24f;
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f);  // RNE, overflow -> ±inf, NaN -> quiet NaN

// ---- E4M3 (float8_e4m3fn) ------------------------------------------------------------------------

inline float e4m3_to_f32(uint8_t b) {
  uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  uint32_t exp = (b >> 3) & 0xFu;
  uint32_t man = b & 0x7u;
  if ((b & 0x7Fu) == 0x7Fu) return std::bit_cast<float>(0x7FC00000u | sign);
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (man << 20));
  float v = static_cast<float>(man) * 0x1p-9f;  // subnormal: (m/8)·2^-6
  return sign ? -v : v;
}

uint8_t f32_to_e4m3_rne(float f);  // see the saturation policy above
uint8_t f32_to_e4m3_sat(float f);

// ---- E2M1 (FP4) ----------------------------------------------------------------------------------

// Codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6; code + 8 = the negative (code 8 = -0).
inline float e2m1_to_f32(uint8_t code4) {
  static constexpr float kTable[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kTable[code4 & 0xFu];
}

uint8_t f32_to_e2m1_rne(float f);  // returns a 4-bit code

// ---- E8M0 ----------------------------------------------------------------------------------------

// 2^(E-127); 0xFF is NaN. E = 0 is 2^-127, an FP32 subnormal.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xFFu) return std::bit_cast<float>(0x7FC00000u);
  if (e == 0) return std::bit_cast<float>(0x00400000u);
  return std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

}  // namespace gridq
