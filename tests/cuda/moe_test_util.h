// Random NVFP4-CB K16 v2 expert stacks for the MoE kernel tests: gate_up [E][2I, H] and down [E][H, I] with
// one shared codebook, uploaded, plus each expert's reference BF16 decode.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "cuda_test_util.h"

namespace gridq::cuda::test {

struct ExpertStacks {
  DeviceWeights gate_up, down;
  std::vector<std::vector<uint16_t>> gu_dense, dn_dense;  // [E] of [2I, H] / [H, I]
};

// table: the v2 scale table the stacks are uploaded with; no_code15: scale code 15 rewritten to 14 (legal
// wherever 15 is) so that a table differing from the default only at entry 15 decodes to the same weights.
inline ExpertStacks make_expert_stacks(int E, int I, int H, Rng& r,
                                       const std::array<float, 16>& table = default_v2_table(),
                                       bool no_code15 = false) {
  CbMatrix gu0 = make_cb_matrix(16, 2, 2 * I, H, r);
  std::vector<uint8_t> gu_canon, dn_canon;
  ExpertStacks s;
  for (int e = 0; e < E; ++e) {
    CbMatrix g = make_cb_matrix(16, 2, 2 * I, H, r);
    CbMatrix d = make_cb_matrix(16, 2, H, I, r);
    // Re-decode with the shared codebook gu0.cb_f16: rebuild dense from canonical bytes.
    for (CbMatrix* m : {&g, &d}) {
      const size_t ts = m->rung.type_size();  // v2 superblock: 64 index bytes, E, 8 bytes of 4-bit codes
      for (size_t sb = 0; no_code15 && sb < m->canonical.size() / ts; ++sb)
        for (size_t b = ts - 8; b < ts; ++b) {
          uint8_t& v = m->canonical[sb * ts + b];
          if ((v & 0x0F) == 0x0F) v = static_cast<uint8_t>((v & 0xF0) | 0x0E);
          if ((v & 0xF0) == 0xF0) v = static_cast<uint8_t>((v & 0x0F) | 0xE0);
        }
      m->cb_f16 = gu0.cb_f16;
      std::vector<std::span<const uint16_t>> tabs{
          std::span<const uint16_t>(m->cb_f16).first(m->cb_f16.size() / 2),
          std::span<const uint16_t>(m->cb_f16).last(m->cb_f16.size() / 2)};
      auto book = gridbook::Codebook::from_f16_tables(m->rung, tabs);
      EXPECT_TRUE(book.ok());
      const size_t rb = static_cast<size_t>(m->in / 256) * m->rung.type_size();
      for (int row = 0; row < m->rows; ++row)
        gridbook::decode_row(m->rung, *book, m->canonical.data() + rb * row, m->in, 0.0f,
                             m->dense.data() + static_cast<size_t>(row) * m->in);
    }
    gu_canon.insert(gu_canon.end(), g.canonical.begin(), g.canonical.end());
    dn_canon.insert(dn_canon.end(), d.canonical.begin(), d.canonical.end());
    s.gu_dense.push_back(g.dense);
    s.dn_dense.push_back(d.dense);
  }
  auto gud = upload_cb(16, 2, 2 * I, H, E, gu_canon, gu0.cb_f16, table);
  auto dnd = upload_cb(16, 2, H, I, E, dn_canon, gu0.cb_f16, table);
  EXPECT_TRUE(gud.ok() && dnd.ok());
  if (gud.ok()) s.gate_up = std::move(*gud);
  if (dnd.ok()) s.down = std::move(*dnd);
  return s;
}

}  // namespace gridq::cuda::test
