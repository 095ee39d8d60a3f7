// The device sampler (runtime/cuda/kernels/sample.cu) against the host sampler it mirrors
// (runtime::Sampler::run, runtime/sampler.h): the same logits, plans and uniforms give the same token, except
// where u lies within 1e-9 of a partial sum of the host's CDF (the documented ulp-level tolerance of a
// different summation order), and the same logprob to 1e-5. Then the plumbing: forward_sampled on the bundled
// model gives the tokens that forward + the host sampler give, row by row, and the same tokens alone as
// beside 15 other sequences. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "../runtime/parity_util.h"
#include "cuda_test_util.h"
#include "engine_test_util.h"
#include "runtime/cuda/sample_args.h"
#include "runtime/sampler.h"

namespace gridq::cuda::test {
namespace {

using runtime::SamplePlan;
using testing::repo_path;
constexpr unsigned kAllKinds = detail::kSampleChunked | detail::kSampleOther;

struct Case {
  const char* name;
  float temperature;
  int top_k;
  float top_p, min_p, rep, presence;
  bool ban, bias;
};

const Case kCases[] = {
    {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, false, false},
    {"greedy+penalties+ban+bias", 0.0f, 0, 1.0f, 0.0f, 1.3f, 0.5f, true, true},
    {"temperature 1", 1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, false, false},
    {"temperature 0.5", 0.5f, 0, 1.0f, 0.0f, 1.0f, 0.0f, false, false},
    {"temperature 0.7 + penalties", 0.7f, 0, 1.0f, 0.0f, 1.2f, 0.3f, true, true},
    {"top_k 1", 1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, false, false},
    {"top_k 40", 0.8f, 40, 1.0f, 0.0f, 1.0f, 0.0f, false, false},
    {"top_p 0.9", 1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, false, false},
    {"top_p 0.5 top_k 50", 1.0f, 50, 0.5f, 0.0f, 1.0f, 0.0f, false, true},
    {"min_p 0.05", 1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, false, false},
    {"all filters + penalties", 0.9f, 100, 0.95f, 0.02f, 1.1f, 0.2f, true, true},
};

// Host partial sums of p in id order: true when u is within tol of one (the token may then differ by
// rounding).
bool near_boundary(const std::vector<double>& p, double u, double tol) {
  double acc = 0.0;
  for (double x : p) {
    if (x <= 0.0) continue;
    acc += x;
    if (std::fabs(acc - u) < tol) return true;
  }
  return false;
}

TEST(CudaSampler, KernelMatchesHostSampler) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test_seed());
  int compared = 0, near = 0, host_rows = 0, mismatched = 0;
  for (int V : {1000, 100352, 151936}) {
    for (double spread : {8.0, 3.0, 0.3}) {  // peaked … flat (the flat rows exceed the candidate sort)
      constexpr int R = 16;
      std::vector<float> logits(static_cast<size_t>(R) * V);
      std::normal_distribution<double> nd(0.0, spread);
      for (auto& x : logits) x = static_cast<float>(nd(rng));
      for (const Case& c : kCases) {
        std::vector<SamplePlan> plans(R);
        std::vector<detail::SampleRowArgs> args;
        std::vector<detail::SampleEdit> edits;
        for (int r = 0; r < R; ++r) {
          runtime::SamplingParams sp;
          sp.temperature = c.temperature, sp.top_k = c.top_k, sp.top_p = c.top_p, sp.min_p = c.min_p;
          sp.repetition_penalty = c.rep, sp.presence_penalty = c.presence, sp.seed = rng();
          if (c.bias) sp.logit_bias = {{3, 5.0f}, {V - 1, -2.0f}, {static_cast<int>(rng() % V), 1.5f}};
          std::vector<int32_t> prompt, gen, banned;
          for (int i = 0; i < 50; ++i) prompt.push_back(static_cast<int32_t>(rng() % V));
          for (int i = 0; i < 20; ++i) gen.push_back(static_cast<int32_t>(rng() % 64));
          if (c.ban) banned = {0, 1, 2, static_cast<int32_t>(rng() % V)};
          runtime::Sampler s(sp);
          plans[r] = s.plan(static_cast<size_t>(V), prompt, gen, banned);
          ASSERT_OK(detail::append_sample_row(plans[r], r, V, args, edits));
        }
        auto d_logits = DeviceBuffer::alloc(logits.size() * 4, "t");
        auto d_args = DeviceBuffer::alloc(args.size() * sizeof(args[0]), "t");
        auto d_edits =
            DeviceBuffer::alloc(std::max<size_t>(1, edits.size()) * sizeof(detail::SampleEdit), "t");
        auto d_scratch = DeviceBuffer::alloc(static_cast<size_t>(R) * V * 8, "t");
        auto d_out = DeviceBuffer::alloc(R * sizeof(detail::SampleResult), "t");
        auto d_greedy = DeviceBuffer::alloc(detail::greedy_scratch_bytes(R), "t");
        ASSERT_TRUE(d_logits.ok() && d_args.ok() && d_edits.ok() && d_scratch.ok() && d_out.ok() &&
                    d_greedy.ok());
        ASSERT_OK(d_greedy->zero());
        ASSERT_OK(d_logits->upload(logits.data(), logits.size() * 4));
        ASSERT_OK(d_args->upload(args.data(), args.size() * sizeof(args[0])));
        if (!edits.empty()) ASSERT_OK(d_edits->upload(edits.data(), edits.size() * sizeof(edits[0])));
        auto launch = [&](int rows, int first, std::vector<detail::SampleResult>& res) {
          res.assign(static_cast<size_t>(rows), {});
          ASSERT_EQ(detail::raw_sample_rows(
                        d_logits->as<float>(), V, V, d_args->as<detail::SampleRowArgs>() + first, rows,
                        d_edits->as<detail::SampleEdit>(), d_scratch->as<double>(), d_greedy->as(),
                        d_out->as<detail::SampleResult>(), kAllKinds, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaMemcpy(res.data(), d_out->as(), rows * sizeof(res[0]), cudaMemcpyDeviceToHost),
                    cudaSuccess);
        };
        std::vector<detail::SampleResult> all, again, alone;
        launch(R, 0, all);
        launch(R, 0, again);
        launch(1, 5, alone);
        for (int r = 0; r < R; ++r) {
          ASSERT_EQ(all[r].token, again[r].token) << c.name << ": run to run";
          ASSERT_EQ(all[r].status, again[r].status);
        }
        EXPECT_EQ(alone[0].token, all[5].token) << c.name << ": row 5 alone vs in 16";
        for (int r = 0; r < R; ++r) {
          std::span<const float> row(logits.data() + static_cast<size_t>(r) * V, static_cast<size_t>(V));
          ASSERT_NE(all[r].status, 2) << c.name;
          if (all[r].status == 1) {  // left to the host: only rows whose candidates exceed the device sort
            ++host_rows;
            EXPECT_FALSE(plans[r].greedy) << c.name;
            continue;
          }
          const runtime::SampledToken h = runtime::Sampler::run(plans[r], row);
          ++compared;
          if (all[r].token != h.token) {
            std::vector<double> s(row.begin(), row.end());
            runtime::apply_edits(s, plans[r].edits, plans[r].repetition);
            runtime::SamplingParams fp;
            fp.temperature = static_cast<float>(plans[r].temperature), fp.top_k = plans[r].top_k;
            fp.top_p = static_cast<float>(plans[r].top_p), fp.min_p = static_cast<float>(plans[r].min_p);
            if (!plans[r].greedy && near_boundary(runtime::filtered_probs(s, fp), plans[r].u, 1e-9)) {
              ++near;
              continue;
            }
            ++mismatched;
            ADD_FAILURE() << c.name << " V=" << V << " spread=" << spread << " row " << r << ": device "
                          << all[r].token << " host " << h.token;
          }
          EXPECT_NEAR(all[r].logprob, h.logprob, 1e-5) << c.name;
        }
      }
    }
  }
  std::printf(
      "[gpu sampler] %d rows compared with the host sampler: %d mismatched, %d within 1e-9 of a CDF "
      "boundary, %d rows left to the host (flat rows past the candidate sort)\n",
      compared, mismatched, near, host_rows);
  EXPECT_GT(compared, 300);
}

TEST(CudaSampler, NonFiniteLogitsFailTheRow) {
  REQUIRE_GPU();
  const int V = 4096;
  std::vector<float> logits(static_cast<size_t>(V), 0.5f);
  logits[77] = std::nanf("");
  detail::SampleRowArgs a;
  auto d_logits = DeviceBuffer::alloc(logits.size() * 4, "t");
  auto d_args = DeviceBuffer::alloc(sizeof(a), "t");
  auto d_scratch = DeviceBuffer::alloc(static_cast<size_t>(V) * 8, "t");
  auto d_out = DeviceBuffer::alloc(sizeof(detail::SampleResult), "t");
  auto d_greedy = DeviceBuffer::alloc(detail::greedy_scratch_bytes(1), "t");
  ASSERT_TRUE(d_logits.ok() && d_args.ok() && d_scratch.ok() && d_out.ok() && d_greedy.ok());
  ASSERT_OK(d_greedy->zero());
  ASSERT_OK(d_logits->upload(logits.data(), logits.size() * 4));
  ASSERT_OK(d_args->upload(&a, sizeof(a)));
  ASSERT_EQ(detail::raw_sample_rows(d_logits->as<float>(), V, V, d_args->as<detail::SampleRowArgs>(), 1,
                                    nullptr, d_scratch->as<double>(), d_greedy->as(),
                                    d_out->as<detail::SampleResult>(), kAllKinds, nullptr),
            cudaSuccess);
  auto run = [&]() {
    detail::SampleResult r;
    EXPECT_EQ(detail::raw_sample_rows(d_logits->as<float>(), V, V, d_args->as<detail::SampleRowArgs>(), 1,
                                      nullptr, d_scratch->as<double>(), d_greedy->as(),
                                      d_out->as<detail::SampleResult>(), kAllKinds, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&r, d_out->as(), sizeof(r), cudaMemcpyDeviceToHost), cudaSuccess);
    return r;
  };
  detail::SampleResult r;
  ASSERT_EQ(cudaMemcpy(&r, d_out->as(), sizeof(r), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(r.status, 2) << "a NaN";
  // -inf only rules a token out (runtime::nonfinite_logits); a row with no finite value at all is refused.
  std::fill(logits.begin(), logits.end(), -INFINITY);
  logits[9] = 1.0f;
  ASSERT_OK(d_logits->upload(logits.data(), logits.size() * 4));
  r = run();
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.token, 9);
  logits[9] = -INFINITY;
  ASSERT_OK(d_logits->upload(logits.data(), logits.size() * 4));
  EXPECT_EQ(run().status, 2) << "no finite logit";
}

// Rows without score edits on the device, and raw_sample_rows launches of a range of them: the chunked
// kernel's scratch zeroed once, as the backend does, and kept across launches (each launch must leave it
// reset); `scores` allocates sample.cu's scratch (the launches with kAllKinds pass it).
struct PlainRows {
  int V = 0;
  DeviceBuffer logits, args, scores, out, greedy;
  std::vector<detail::SampleResult> launch(int rows, int first, unsigned kinds) {
    std::vector<detail::SampleResult> res(static_cast<size_t>(rows));
    EXPECT_EQ(detail::raw_sample_rows(logits.as<float>(), V, V, args.as<detail::SampleRowArgs>() + first,
                                      rows, nullptr, scores.as<double>(), greedy.as(),
                                      out.as<detail::SampleResult>(), kinds, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(res.data(), out.as(), rows * sizeof(res[0]), cudaMemcpyDeviceToHost), cudaSuccess);
    return res;
  }
};

Expected<PlainRows> plain_rows(const std::vector<float>& logits, int V,
                               const std::vector<detail::SampleRowArgs>& args, bool scores) {
  PlainRows d;
  d.V = V;
  const size_t R = args.size();
  GRIDQ_ASSIGN_OR_RETURN(d.logits, DeviceBuffer::alloc(logits.size() * 4, "t"));
  GRIDQ_ASSIGN_OR_RETURN(d.args, DeviceBuffer::alloc(R * sizeof(args[0]), "t"));
  if (scores) {
    GRIDQ_ASSIGN_OR_RETURN(d.scores, DeviceBuffer::alloc(R * V * 8, "t"));
  }
  GRIDQ_ASSIGN_OR_RETURN(d.out, DeviceBuffer::alloc(R * sizeof(detail::SampleResult), "t"));
  GRIDQ_ASSIGN_OR_RETURN(d.greedy, DeviceBuffer::alloc(detail::greedy_scratch_bytes(R), "t"));
  GRIDQ_RETURN_IF_ERROR(d.greedy.zero());
  GRIDQ_RETURN_IF_ERROR(d.logits.upload(logits.data(), logits.size() * 4));
  GRIDQ_RETURN_IF_ERROR(d.args.upload(args.data(), R * sizeof(args[0])));
  return d;
}

// Plain greedy rows (sample_greedy.cu: a row cut into chunks, folded by its last block) on ties across
// chunks, rows that are -inf but for a few ids, a flat row and the last id: the host sampler's token (the
// lowest index of the largest logit) and logprob, run to run (the per-row counters are left reset) and with
// a row alone as among others, a launch of one row before and after launches of eight (each launch row's
// scratch region stays its own whatever the launch size).
TEST(CudaSampler, GreedyRowsAcrossChunks) {
  REQUIRE_GPU();
  const int V = 100352, R = 8;  // rows 4-7 repeat rows 0-3
  ASSERT_GT(detail::greedy_chunk_len(V) * (detail::kGreedyChunks - 1), 70001) << "ties in different chunks";
  std::vector<float> logits(static_cast<size_t>(R) * V);
  std::mt19937_64 rng(test_seed());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  float* row[R];
  for (int r = 0; r < R; ++r) row[r] = logits.data() + static_cast<size_t>(r) * V;
  for (int i = 0; i < V; ++i)
    row[0][i] = nd(rng), row[1][i] = -INFINITY, row[2][i] = 0.25f, row[3][i] = -INFINITY;
  row[0][70001] = row[0][3100] = 9.0f;  // the same max in two chunks: the lower id
  row[1][V - 1] = row[1][5] = 2.0f;     // -inf elsewhere (chunks with nothing finite)
  row[3][V - 1] = -3.0f;                // the last id of the last chunk
  for (int r = 4; r < R; ++r) std::copy(row[r - 4], row[r - 4] + V, row[r]);
  const runtime::SamplePlan greedy;
  std::vector<detail::SampleRowArgs> args;
  std::vector<detail::SampleEdit> edits;
  for (int r = 0; r < R; ++r) ASSERT_OK(detail::append_sample_row(greedy, r, V, args, edits));
  ASSERT_TRUE(edits.empty() && detail::plain_greedy(args[0]));
  auto d = plain_rows(logits, V, args, true);
  ASSERT_TRUE(d.ok()) << d.message();
  auto launch = [&](int rows, int first) { return d->launch(rows, first, kAllKinds); };
  const auto first = launch(1, 2), all = launch(R, 0), again = launch(R, 0), alone = launch(1, 2);
  const int want[R] = {3100, 5, 0, V - 1, 3100, 5, 0, V - 1};
  for (int r = 0; r < R; ++r) {
    const runtime::SampledToken h =
        runtime::Sampler::run(greedy, std::span<const float>(row[r], static_cast<size_t>(V)));
    ASSERT_EQ(h.token, want[r]) << "row " << r;
    EXPECT_EQ(all[r].status, 0) << "row " << r;
    EXPECT_EQ(all[r].token, h.token) << "row " << r;
    EXPECT_NEAR(all[r].logprob, h.logprob, 1e-5) << "row " << r;
    EXPECT_EQ(again[r].token, all[r].token) << "row " << r << ": run to run";
    EXPECT_EQ(again[r].logprob, all[r].logprob) << "row " << r << ": run to run";
  }
  for (const auto* one : {&first, &alone}) {
    EXPECT_EQ((*one)[0].token, all[2].token);
    EXPECT_EQ((*one)[0].logprob, all[2].logprob) << "row 2 alone vs among 8";
  }
}

// Rows at a temperature with no filter take the chunked kernel too: the crossing chunk's walk against the
// host's inverse CDF on rows whose sums are exact (a flat row: the token is ⌊u·V⌋; a row with one finite
// id; -inf chunks around two finite ids) and on a random one, for several uniforms, alone and among 8.
TEST(CudaSampler, TemperatureRowsAcrossChunks) {
  REQUIRE_GPU();
  const int V = 100352, R = 8;
  std::vector<float> logits(static_cast<size_t>(R) * V, -INFINITY);
  std::mt19937_64 rng(test_seed());
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int i = 0; i < V; ++i) logits[static_cast<size_t>(i)] = nd(rng), logits[size_t(V) + i] = 0.25f;
  logits[2 * size_t(V) + V - 1] = -3.0f;
  logits[3 * size_t(V) + 5] = logits[3 * size_t(V) + 70001] = 2.0f;
  for (int r = 4; r < R; ++r)
    std::copy(logits.begin() + (r - 4) * size_t(V), logits.begin() + (r - 3) * size_t(V),
              logits.begin() + r * size_t(V));
  std::vector<runtime::SamplePlan> plans;
  std::vector<detail::SampleRowArgs> args;
  std::vector<detail::SampleEdit> edits;
  for (int r = 0; r < R; ++r) {
    runtime::SamplingParams sp;
    sp.temperature = r < 4 ? 0.8f : 1.7f, sp.seed = rng();
    runtime::Sampler smp(sp);
    plans.push_back(smp.plan(static_cast<size_t>(V), {}, {}, {}));
    ASSERT_OK(detail::append_sample_row(plans.back(), r, V, args, edits));
    ASSERT_TRUE(detail::plain_chunked(args.back()) && !detail::plain_greedy(args.back()));
  }
  auto d = plain_rows(logits, V, args, false);
  ASSERT_TRUE(d.ok()) << d.message();
  auto launch = [&](int rows, int first) { return d->launch(rows, first, detail::kSampleChunked); };
  const auto all = launch(R, 0), alone = launch(1, 1);
  for (int r = 0; r < R; ++r) {
    const auto row = std::span<const float>(logits.data() + r * size_t(V), static_cast<size_t>(V));
    const runtime::SampledToken h = runtime::Sampler::run(plans[r], row);
    ASSERT_EQ(all[r].status, 0) << "row " << r;
    EXPECT_EQ(all[r].token, h.token) << "row " << r << " u " << plans[r].u;
    EXPECT_NEAR(all[r].logprob, h.logprob, 1e-5) << "row " << r;
  }
  EXPECT_EQ(all[1].token, static_cast<int>(plans[1].u * V)) << "a flat row: the token is floor(u·V)";
  EXPECT_EQ(all[2].token, V - 1);
  EXPECT_EQ(alone[0].token, all[1].token);
}

// forward_sampled on the bundled model: at every decode step the device's token is the host sampler's on the
// logits forward() returns for the same sequence state (a twin sequence fed the same tokens).
TEST(CudaSampler, ForwardSampledMatchesForwardPlusHostSampler) {
  REQUIRE_GPU();
  auto b = open_both(repo_path("models/laguna-tiny-code"), false);
  ASSERT_TRUE(b.ok()) << b.message();
  runtime::Engine& e = *b->gpu;
  const size_t V = static_cast<size_t>(e.vocab_size());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>((i * 7919) % static_cast<int>(V)));
  int compared = 0, same = 0;
  for (float temp : {0.0f, 0.8f}) {
    runtime::SamplingParams sp;
    sp.temperature = temp, sp.top_p = 0.95f, sp.top_k = 50, sp.seed = 1234, sp.repetition_penalty = 1.1f;
    runtime::Sampler s(sp);
    const runtime::SeqId a = e.create_sequence(), twin = e.create_sequence();
    std::vector<int32_t> gen;
    SamplePlan plan = s.plan(V, prompt, gen);
    auto first = e.prefill_sampled(a, prompt, plan);
    auto tl = e.prefill(twin, prompt);
    ASSERT_TRUE(first.ok() && tl.ok());
    runtime::SampledToken dev = *first, host = runtime::Sampler::run(plan, *tl);
    for (int step = 0; step < 64; ++step) {
      ++compared;
      same += dev.token == host.token;
      EXPECT_EQ(dev.token, host.token) << "temperature " << temp << " step " << step;
      gen.push_back(dev.token);
      plan = s.plan(V, prompt, gen);
      const SamplePlan* plans[1] = {&plan};
      runtime::SeqId ids[1] = {a}, tids[1] = {twin};
      int32_t in[1] = {dev.token};
      auto d = e.decode_sampled(ids, in, plans);
      auto l = e.decode(tids, in);
      ASSERT_TRUE(d.ok() && l.ok());
      dev = d->at(0);
      host = runtime::Sampler::run(plan, *l);
    }
    e.free_sequence(a);
    e.free_sequence(twin);
  }
  std::printf("[gpu sampler] forward_sampled vs forward + host sampler: %d/%d tokens equal\n", same,
              compared);
}

}  // namespace
}  // namespace gridq::cuda::test
