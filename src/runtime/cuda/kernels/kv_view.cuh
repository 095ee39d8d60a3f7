// The one place the device KV layout is read (forward_kernels.h KvView): position `pos` of the sequence in
// slot `slot` → its K (or V) row of n_kv · d BF16 values.
#pragma once

#include "runtime/cuda/kernels/forward_kernels.h"

namespace gridq::cuda::detail {

__device__ __forceinline__ uint16_t* kv_row(const KvView& kv, int slot, int pos, bool value) {
  const long long off = value ? kv.v_off : kv.k_off;
  const long long in_page = static_cast<long long>(pos % kv.page_tokens) * kv.kvw;
  if (kv.sliding) return kv.base + static_cast<long long>(slot) * kv.page_elems + off + in_page;
  const int page = kv.page_table[static_cast<long long>(slot) * kv.max_pages + pos / kv.page_tokens];
  return kv.base + static_cast<long long>(page) * kv.page_elems + off + in_page;
}

}  // namespace gridq::cuda::detail
