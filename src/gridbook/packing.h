// The index stream of a superblock (format.md §5): 32 codewords of k bits, LSB first, codeword c at stream
// bits [c·k, c·k + k). Product-mode codes are sub-indices concatenated with sub-index 0 in the low bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "gridbook/rung.h"

namespace gridq::gridbook {

inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];  // byte-order independent; compilers emit one load
  return v;
}

inline uint64_t code_mask(int k) { return k >= 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1; }

// The kernel formula: code = (le64(sb + floor(c·k/8)) >> (c·k mod 8)) & (2^k − 1). The 8-byte window may
// extend up to 7 bytes past the codeword's last byte, so the buffer needs that much slack (fp8 rows have no
// scale plane after the index stream; gridq allocates 16 bytes of slack after the last row).
inline uint64_t read_code(const uint8_t* sb, int c, int k) {
  int bit = c * k;
  return (load_le64(sb + bit / 8) >> (bit % 8)) & code_mask(k);
}

// Same value, touching only the bytes that hold codeword c: safe on buffers without slack.
inline uint64_t read_code_exact(const uint8_t* sb, int c, int k) {
  int bit = c * k;
  int first = bit / 8;
  int shift = bit % 8;
  int nbytes = (shift + k + 7) / 8;  // <= 7 for k <= 48
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | sb[first + i];
  return (v >> shift) & code_mask(k);
}

// Writes the 4k index bytes of a superblock from 32 codes. Precondition: codes.size() == 32 and every
// code < 2^k (check_codes); bits above k would corrupt the next codeword.
void pack_codes(std::span<const uint64_t> codes, int k, uint8_t* sb);

// Reads the 32 codes of a superblock (exact reads, no slack needed).
void unpack_codes(const uint8_t* sb, int k, uint64_t codes[kCodewords]);

// Refuses a code count other than 32 and any code >= 2^k.
Status check_codes(std::span<const uint64_t> codes, int k);

// Product mode: code = sum_i sub_idx[i] << offset[i]; split_code is the inverse.
uint64_t compose_code(const SubSplit& s, std::span<const uint32_t> sub_idx);
inline void split_code(const SubSplit& s, uint64_t code, uint32_t* sub_idx) {
  for (int i = 0; i < s.n; ++i)
    sub_idx[i] = static_cast<uint32_t>((code >> s.offset[i]) & code_mask(s.width[i]));
}

}  // namespace gridq::gridbook
