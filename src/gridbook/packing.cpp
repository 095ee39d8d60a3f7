// Bit packing of the index stream. Writing goes bit-run by bit-run through a 64-bit window so that a
// codeword straddling any number of bytes (k up to 48) is handled by one code path.
#include "gridbook/packing.h"

#include <algorithm>

namespace gridq::gridbook {

void pack_codes(std::span<const uint64_t> codes, int k, uint8_t* sb) {
  std::memset(sb, 0, static_cast<size_t>(4 * k));
  for (int c = 0; c < kCodewords; ++c) {
    uint64_t code = codes[static_cast<size_t>(c)] & code_mask(k);
    int bit = c * k;
    int first = bit / 8;
    int shift = bit % 8;
    int nbytes = (shift + k + 7) / 8;
    // shift + k <= 7 + 48 < 64, so the shifted code fits one uint64.
    uint64_t v = code << shift;
    for (int i = 0; i < nbytes; ++i) sb[first + i] |= static_cast<uint8_t>(v >> (8 * i));
  }
}

void unpack_codes(const uint8_t* sb, int k, uint64_t codes[kCodewords]) {
  for (int c = 0; c < kCodewords; ++c) codes[c] = read_code_exact(sb, c, k);
}

Status check_codes(std::span<const uint64_t> codes, int k) {
  if (codes.size() != static_cast<size_t>(kCodewords))
    return err("superblock codes: got {} codewords, a superblock holds {}", codes.size(), kCodewords);
  for (size_t c = 0; c < codes.size(); ++c) {
    if (codes[c] > code_mask(k))
      return err("superblock codes: codeword {} = {} does not fit k = {} bits", c, codes[c], k);
  }
  return {};
}

uint64_t compose_code(const SubSplit& s, std::span<const uint32_t> sub_idx) {
  uint64_t code = 0;
  for (int i = 0; i < s.n; ++i)
    code |= (static_cast<uint64_t>(sub_idx[static_cast<size_t>(i)]) & code_mask(s.width[i])) << s.offset[i];
  return code;
}

}  // namespace gridq::gridbook
