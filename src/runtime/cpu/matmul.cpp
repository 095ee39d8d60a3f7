// The matmul op (matmul.h): activation contracts, then the output rows of every job in blocks of four,
// the blocks of all jobs cut into one contiguous range per thread at equal cost.
#include "runtime/cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/numerics.h"
#include "runtime/cpu/act_contract.h"
#include "runtime/cpu/bf16_dot.h"
#include "runtime/cpu/cb_rows.h"
#include "runtime/cpu/dot_kernels.h"
#include "runtime/cpu/scratch.h"
#include "runtime/cpu/thread_pool.h"

namespace gridq::runtime::cpu {

namespace {

constexpr int64_t kRowBlock = 4;        // weight rows widened to fp32 together, then reused for every token
constexpr int64_t kFusedMaxTokens = 4;  // below this many tokens rows are read in place, not widened first
// Decode reads BF16/E4M3 rows one at a time, front to back, prefetching this far ahead: out of cache one
// sequential stream is read faster than the four interleaved ones of a 4-row kernel (measured here: ~30%
// more decode tok/s with the weights in DRAM), and in cache the 2-chain dot is still ahead of the loads.
constexpr int64_t kPrefetchBytes = 2048;
constexpr int64_t kParallelWork = int64_t{1} << 15;  // multiply-adds below which a pool wake-up costs more

enum class Contract { kNone, kW8A8, kQdq8, kQdq4 };

Contract contract_of(const QMatrix& w) {
  if (w.format == WeightFormat::kFP8) return Contract::kW8A8;
  if (w.act_bits == 8) return Contract::kQdq8;
  if (w.act_bits == 4) return Contract::kQdq4;
  return Contract::kNone;
}

// One job's input after its contract: xa [T, C], (W8A8) the per-token scales, and (fast path) xa rounded
// to BF16.
struct Input {
  const float* x = nullptr;
  int64_t T = 0, C = 0;
  Contract k = Contract::kNone;
  bool bf16 = false;                     // the matrix runs on the fast path (bf16_dot.h)
  LineVector<float>* buf = nullptr;      // [T·C values | T scales]
  LineVector<uint16_t>* bbuf = nullptr;  // [T·C] bf16 values (bf16 only)
  const float* xa() const { return k == Contract::kNone ? x : buf->data(); }
  const float* scale() const { return buf->data() + T * C; }
  const uint16_t* xb() const { return bbuf->data(); }
  bool same_as(const Input& o) const {
    return x == o.x && T == o.T && C == o.C && k == o.k && bf16 == o.bf16;
  }
  bool needs_work() const { return k != Contract::kNone || bf16; }
};

void apply_contract(const Input& in, int64_t t) {
  const float* x = in.x + t * in.C;
  float* q = in.k == Contract::kNone ? nullptr : in.buf->data() + t * in.C;
  switch (in.k) {
    case Contract::kW8A8:
      in.buf->data()[in.T * in.C + t] = fp8_token_values(x, in.C, q);
      break;
    case Contract::kQdq8:
      qdq_fp8_row(x, in.C, q);
      break;
    case Contract::kQdq4:
      qdq_fp4_row(x, in.C, q);
      break;
    case Contract::kNone:
      break;
  }
  if (in.bf16) round_to_bf16(in.xa() + t * in.C, in.C, in.bbuf->data() + t * in.C);
}

// Rows [r0, r0 + nr) of w as fp32 into rows (kRowBlock × C); F32 rows are used in place.
void rows_f32(const QMatrix& w, int64_t r0, int64_t nr, float* buf, const float** rows) {
  const int64_t C = w.cols;
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t r = r0 + i;
    float* out = buf + i * C;
    rows[i] = out;
    switch (w.format) {
      case WeightFormat::kBF16:
        widen_bf16(static_cast<const uint16_t*>(w.data) + r * C, out, C);
        break;
      case WeightFormat::kF32:
        rows[i] = static_cast<const float*>(w.data) + r * C;
        break;
      case WeightFormat::kFP8:  // unscaled: the scales go into the epilogue
        widen_e4m3(static_cast<const uint8_t*>(w.data) + r * C, out, C);
        break;
      case WeightFormat::kCB:
        decode_cb_row(w, r, out);
        break;
    }
  }
}

// y[t, r0 .. r0+nr) for one token, the rows read in place (decode).
// x256: 256·xt (E4M3 rows only).
void block_in_place(const QMatrix& w, int64_t r0, int64_t nr, const float* xt, const float* x256, float* yt) {
  const int64_t C = w.cols;
  switch (w.format) {
    case WeightFormat::kBF16: {
      const uint16_t* wb = static_cast<const uint16_t*>(w.data) + r0 * C;
      for (int64_t i = 0; i < nr; ++i) yt[i] = dot_bf16(wb + i * C, xt, C, kPrefetchBytes / 2);
      return;
    }
    case WeightFormat::kF32: {
      const float* wf = static_cast<const float*>(w.data) + r0 * C;
      if (nr == kRowBlock) {
        const float* const rows[kRowBlock] = {wf, wf + C, wf + 2 * C, wf + 3 * C};
        dot4(xt, rows, C, yt);
      } else {
        for (int64_t i = 0; i < nr; ++i) yt[i] = dot(wf + i * C, xt, C);
      }
      return;
    }
    case WeightFormat::kFP8: {
      const uint8_t* w8 = static_cast<const uint8_t*>(w.data) + r0 * C;
      const uint8_t* const rows[kRowBlock] = {w8, w8 + C, w8 + 2 * C, w8 + 3 * C};
      dot_e4m3_x256(rows, static_cast<int>(nr), xt, x256, C, yt, kRowBlock * C);
      return;
    }
    case WeightFormat::kCB:
      cb_dot_rows(w, r0, static_cast<int>(nr), xt, yt);
      return;
  }
}

// FP8 W8A8's epilogue (format.md §12) on y[t, r0 .. r0+nr): y = bf16_rn(s_tok · weight_scale[r] · dot).
void w8a8_epilogue(const QMatrix& w, const Input& in, int64_t t, int64_t r0, int64_t nr, float* yt) {
  const float ts = in.scale()[t];
  for (int64_t i = 0; i < nr; ++i) yt[i] = bf16_round(ts * w.row_scale[r0 + i] * yt[i]);
}

// Row blocks [b0, b1) of one job on the fast path (bf16_dot.h): rows read in place, tokens in tiles that
// stay in L2 at prefill, each thread keeping its row blocks for every tile.
void run_blocks_bf16(const MatJob& j, const Input& in, int64_t b0, int64_t b1) {
  const QMatrix& w = *j.w;
  const int64_t R = w.rows, C = w.cols, T = j.T;
  const bool w8a8 = w.format == WeightFormat::kFP8;
  const int64_t tile = T < kFusedMaxTokens ? T : std::max<int64_t>(16, (int64_t{256} << 10) / (C * 2));
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int64_t nt = std::min(tile, T - t0);
    if (w.format == WeightFormat::kCB) {  // every row block of the range in one call (the books load once)
      const int64_t r0 = b0 * kRowBlock, nr = std::min(b1 * kRowBlock, R) - r0;
      cb_dot_rows_bf16(w, r0, static_cast<int>(nr), in.xb() + t0 * C, nt, j.y + t0 * R + r0, R);
      continue;
    }
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * kRowBlock, nr = std::min(kRowBlock, R - r0);
      float* y = j.y + t0 * R + r0;
      if (w8a8) {
        bf16_dot_rows_e4m3(static_cast<const uint8_t*>(w.data) + r0 * C, C, static_cast<int>(nr),
                           in.xb() + t0 * C, nt, y, R);
        for (int64_t t = 0; t < nt; ++t) w8a8_epilogue(w, in, t0 + t, r0, nr, y + t * R);
      } else {
        bf16_dot_rows(static_cast<const uint16_t*>(w.data) + r0 * C, C, static_cast<int>(nr),
                      in.xb() + t0 * C, nt, y, R);
      }
    }
  }
}

// Row blocks [b0, b1) of one job, all of its tokens.
void run_blocks(const MatJob& j, const Input& in, int64_t b0, int64_t b1) {
  if (in.bf16) return run_blocks_bf16(j, in, b0, b1);
  const QMatrix& w = *j.w;
  const int64_t R = w.rows, C = w.cols, T = j.T;
  const float* xa = in.xa();
  const bool w8a8 = w.format == WeightFormat::kFP8;
  auto epilogue = [&](int64_t t, int64_t r0, int64_t nr, float* yt) {
    if (w8a8) w8a8_epilogue(w, in, t, r0, nr, yt);
  };
  if (T < kFusedMaxTokens) {
    thread_local std::vector<float> x256;  // [T, C] 256·xa for the E4M3 kernel (exact)
    if (w8a8) {
      x256.resize(static_cast<size_t>(T * C));
      for (int64_t i = 0; i < T * C; ++i) x256[static_cast<size_t>(i)] = xa[i] * 256.0f;
    }
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * kRowBlock, nr = std::min(kRowBlock, R - r0);
      for (int64_t t = 0; t < T; ++t) {
        float* yt = j.y + t * R + r0;
        block_in_place(w, r0, nr, xa + t * C, x256.data() + t * C, yt);
        epilogue(t, r0, nr, yt);
      }
    }
    return;
  }
  // Prefill walks the tokens in tiles that stay in L2 (x is re-read once per 4-row block); each thread
  // keeps its row blocks for every tile.
  thread_local LineVector<float> wrow;  // [kRowBlock, C] the block's rows widened
  wrow.resize(static_cast<size_t>(kRowBlock * C));
  const int64_t tile =
      std::max<int64_t>(16, (int64_t{256} << 10) / (C * static_cast<int64_t>(sizeof(float))));
  for (int64_t t0 = 0; t0 < T; t0 += tile) {
    const int64_t t1 = std::min(T, t0 + tile);
    for (int64_t rb = b0; rb < b1; ++rb) {
      const int64_t r0 = rb * kRowBlock, nr = std::min(kRowBlock, R - r0);
      const float* rows[kRowBlock];
      rows_f32(w, r0, nr, wrow.data(), rows);
      for (int64_t t = t0; t < t1; ++t) {
        const float* xt = xa + t * C;
        float* yt = j.y + t * R + r0;
        if (nr == kRowBlock)
          dot4(xt, rows, C, yt);
        else
          for (int64_t i = 0; i < nr; ++i) yt[i] = dot(rows[i], xt, C);
        epilogue(t, r0, nr, yt);
      }
    }
  }
}

}  // namespace

void matmul(const QMatrix& w, const float* x, int64_t T, float* y) {
  const MatJob j{&w, x, T, y};
  matmul_jobs(std::span<const MatJob>(&j, 1));
}

void matmul_jobs(std::span<const MatJob> jobs) {
  // Kept per calling thread: a decode step allocates nothing here once warm. (Named references, because a
  // lambda run by a worker would otherwise see that worker's own thread_local instances.)
  thread_local std::vector<Input> t_inputs;                   // [jobs] each job's contract input
  thread_local std::vector<LineVector<float>> t_buffers;      // contract outputs, one per distinct input
  thread_local std::vector<LineVector<uint16_t>> t_bbuffers;  // the same rounded to BF16 (fast path)
  thread_local std::vector<int64_t> t_first, t_cost;  // [jobs + 1] first block; [blocks + 1] prefix cost
  thread_local std::vector<std::pair<const Input*, int64_t>> t_todo;  // (input, token) contract tasks
  thread_local std::vector<bool> t_owner;  // [jobs] the job whose input buffers the others share
  auto& inputs = t_inputs;
  auto& buffers = t_buffers;
  auto& bbuffers = t_bbuffers;
  auto& first = t_first;
  auto& cost = t_cost;
  auto& todo = t_todo;
  inputs.assign(jobs.size(), Input{});
  if (buffers.size() < jobs.size()) buffers.resize(jobs.size());  // before taking pointers into them
  if (bbuffers.size() < jobs.size()) bbuffers.resize(jobs.size());
  size_t n_buf = 0;
  int64_t contract_values = 0;
  std::vector<bool>& owner = t_owner;
  owner.assign(jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const MatJob& j = jobs[i];
    Input& in = inputs[i];
    in = Input{j.x, j.T, j.w->cols, contract_of(*j.w), j.w->cpu_bf16_dot, nullptr, nullptr};
    if (!in.needs_work() || j.T <= 0) continue;
    size_t p = 0;
    while (p < i && !(owner[p] && inputs[p].same_as(in))) ++p;
    if (p < i) {  // the same input as an earlier job's: share its copies
      in.buf = inputs[p].buf;
      in.bbuf = inputs[p].bbuf;
      continue;
    }
    owner[i] = true;
    const size_t b = n_buf++;
    if (in.k != Contract::kNone) {
      in.buf = &buffers[b];
      in.buf->resize(static_cast<size_t>(in.T * (in.C + 1)));
    }
    if (in.bf16) {
      in.bbuf = &bbuffers[b];
      in.bbuf->resize(static_cast<size_t>(in.T * in.C));
    }
    contract_values += in.T * in.C;
  }
  // Contracts: one task per (distinct input, token), in parallel when there are many (prefill).
  if (n_buf > 0) {
    todo.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Input& in = inputs[i];
      if (owner[i])
        for (int64_t t = 0; t < in.T; ++t) todo.emplace_back(&in, t);
    }
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        apply_contract(*todo[static_cast<size_t>(i)].first, todo[static_cast<size_t>(i)].second);
    };
    if (contract_values >= 16 * 1024)
      parallel_for(static_cast<int64_t>(todo.size()), body);
    else
      body(0, static_cast<int64_t>(todo.size()));
  }
  // Row blocks of all jobs, prefix-summed by multiply-adds.
  first.assign(1, 0);
  cost.assign(1, 0);
  for (const MatJob& j : jobs) {
    const int64_t R = j.T > 0 ? j.w->rows : 0;
    const int64_t nb = (R + kRowBlock - 1) / kRowBlock;
    for (int64_t rb = 0; rb < nb; ++rb)
      cost.push_back(cost.back() + std::min(kRowBlock, R - rb * kRowBlock) * j.w->cols * j.T);
    first.push_back(first.back() + nb);
  }
  const int64_t blocks = first.back();
  if (blocks == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    for (size_t i = 0; i < jobs.size() && b < e; ++i) {
      const int64_t lo = std::max(b, first[i]), hi = std::min(e, first[i + 1]);
      if (lo < hi) run_blocks(jobs[i], inputs[i], lo - first[i], hi - first[i]);
    }
  };
  if (cost.back() >= kParallelWork && blocks > 1)
    parallel_for(blocks, body, cost.data());
  else
    body(0, blocks);
  // A prompt's (or the quantizer's chunk's) contract copies are not kept: only decode-sized ones are.
  for (size_t i = 0; i < n_buf; ++i) {
    if (buffers[i].capacity() > Scratch::kKeepFloats) LineVector<float>().swap(buffers[i]);
    if (bbuffers[i].capacity() > Scratch::kKeepFloats) LineVector<uint16_t>().swap(bbuffers[i]);
  }
}

}  // namespace gridq::runtime::cpu
