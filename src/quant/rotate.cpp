#include "quant/rotate.h"

#include <fmt/format.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/numerics.h"
#include "model/loader.h"
#include "quant/export.h"
#include "quant/prng.h"

namespace gridq::quant {

namespace fs = std::filesystem;

namespace {

bool is_prime(int q) {
  if (q < 2) return false;
  for (int d = 2; d * d <= q; ++d)
    if (q % d == 0) return false;
  return true;
}

// Paley construction I: for a prime q ≡ 3 (mod 4), H = I + S with S = [[0, 1ᵀ], [−1, J]] and J the
// Jacobsthal matrix J[i][j] = χ(j − i) (χ the quadratic character mod q) is a Hadamard matrix of order q+1.
std::vector<int8_t> paley_hadamard(int q) {
  const int m = q + 1;
  std::vector<int> chi(static_cast<size_t>(q), -1);
  chi[0] = 0;
  for (int x = 1; x < q; ++x) chi[static_cast<size_t>((x * x) % q)] = 1;
  std::vector<int8_t> h(static_cast<size_t>(m) * m, 0);
  auto at = [&](int i, int j) -> int8_t& { return h[static_cast<size_t>(i) * m + j]; };
  for (int j = 1; j < m; ++j) at(0, j) = 1, at(j, 0) = -1;
  for (int i = 1; i < m; ++i)
    for (int j = 1; j < m; ++j)
      at(i, j) = static_cast<int8_t>(chi[static_cast<size_t>(((j - i) % q + q) % q)]);
  for (int i = 0; i < m; ++i) at(i, i) = static_cast<int8_t>(at(i, i) + 1);
  return h;
}

// In-place unnormalised Walsh–Hadamard transform of v[n] (n a power of two): v ← v·H_n (H_n symmetric).
void fwht(double* v, int n) {
  for (int len = 1; len < n; len <<= 1)
    for (int i = 0; i < n; i += len << 1)
      for (int j = i; j < i + len; ++j) {
        const double a = v[j], b = v[j + len];
        v[j] = a + b;
        v[j + len] = a - b;
      }
}

// v·(H_m ⊗ H_p2) with index i = a·p2 + b (transpose_m: H_mᵀ instead of H_m).
void kron_apply(const Rotation& r, double* v, bool transpose_m) {
  for (int a = 0; a < r.m; ++a) fwht(v + static_cast<size_t>(a) * r.p2, r.p2);
  if (r.m == 1) return;
  std::vector<double> col(static_cast<size_t>(r.m));
  for (int b = 0; b < r.p2; ++b) {
    for (int a = 0; a < r.m; ++a) col[static_cast<size_t>(a)] = v[static_cast<size_t>(a) * r.p2 + b];
    for (int o = 0; o < r.m; ++o) {  // out[o] = Σ_a col[a]·H[a][o]  (ᵀ: H[o][a])
      double s = 0.0;
      for (int a = 0; a < r.m; ++a)
        s += col[static_cast<size_t>(a)] *
             r.hm[transpose_m ? static_cast<size_t>(o) * r.m + a : static_cast<size_t>(a) * r.m + o];
      v[static_cast<size_t>(o) * r.p2 + b] = s;
    }
  }
}

}  // namespace

void Rotation::apply(double* v) const {  // v·H·D/√n
  kron_apply(*this, v, false);
  const double inv = 1.0 / std::sqrt(static_cast<double>(n));
  for (int i = 0; i < n; ++i) v[i] *= sign[static_cast<size_t>(i)] * inv;
}

void Rotation::apply_inverse(double* v) const {  // v·Qᵀ = (v·D)·Hᵀ/√n
  for (int i = 0; i < n; ++i) v[i] *= sign[static_cast<size_t>(i)];
  kron_apply(*this, v, true);
  const double inv = 1.0 / std::sqrt(static_cast<double>(n));
  for (int i = 0; i < n; ++i) v[i] *= inv;
}

std::string Rotation::describe() const {
  return fmt::format("randomized Hadamard, order {} = {} x 2^{} ({}), seed {:#018x}", n, m,
                     std::countr_zero(static_cast<unsigned>(p2)),
                     m == 1 ? "Sylvester" : "Paley I x Sylvester", seed);
}

Expected<Rotation> make_hadamard_rotation(int n, uint64_t seed) {
  if (n < 1) return err("rotation: order {} must be positive", n);
  Rotation r;
  r.n = n;
  r.seed = seed;
  // The largest power of two whose cofactor is 1 or a Paley order q+1 (q prime, q ≡ 3 mod 4).
  bool found = false;
  for (int k = std::countr_zero(static_cast<unsigned>(n)); k >= 0 && !found; --k) {
    const int m = n >> k;
    if (m == 1 || (m % 4 == 0 && is_prime(m - 1))) {
      r.m = m;
      r.p2 = 1 << k;
      found = true;
    }
  }
  if (!found)
    return err(
        "rotation: no Hadamard matrix of order {} is built in (supported: m·2^k with m = 1 or m = q+1 for a "
        "prime q ≡ 3 mod 4, e.g. 512, 2048, 3072 = 12·256, 5120 = 20·256)",
        n);
  r.hm = r.m == 1 ? std::vector<int8_t>{1} : paley_hadamard(r.m - 1);
  // Fail closed: H_m·H_mᵀ = m·I exactly (integer arithmetic).
  for (int i = 0; i < r.m; ++i)
    for (int j = 0; j < r.m; ++j) {
      int s = 0;
      for (int c = 0; c < r.m; ++c)
        s += r.hm[static_cast<size_t>(i) * r.m + c] * r.hm[static_cast<size_t>(j) * r.m + c];
      if (s != (i == j ? r.m : 0)) return err("rotation: the order-{} Paley matrix is not Hadamard", r.m);
    }
  SplitMix64 g(seed);
  r.sign.resize(static_cast<size_t>(n));
  for (double& s : r.sign) s = (g.next() >> 63) ? -1.0 : 1.0;
  return r;
}

namespace {

enum class Side { kInput, kOutput, kNormOnes, kCopy };

struct RoleAction {
  Side side = Side::kCopy;
  std::string norm;  // kInput: the role of the RMSNorm folded in ("" = none)
};

// What the rotation does to each weight role (weight_map.h names), or an error for a role it does not know.
Expected<RoleAction> action_for(const std::string& role) {
  namespace R = model::roles;
  if (role == R::kEmbed) return RoleAction{Side::kInput, ""};
  if (role == R::kLmHead) return RoleAction{Side::kInput, std::string(R::kFinalNorm)};
  if (role == R::kFinalNorm) return RoleAction{Side::kNormOnes, ""};
  if (!role.starts_with("layers.")) return err("rotation: weight role '{}' is not handled", role);
  const size_t dot = role.find('.', 7);
  const std::string prefix = role.substr(0, dot + 1), suf = role.substr(dot + 1);
  const std::string in_norm = prefix + std::string(R::kInputNorm), post = prefix + std::string(R::kPostNorm);
  if (suf == R::kInputNorm || suf == R::kPostNorm) return RoleAction{Side::kNormOnes, ""};
  if (suf == R::kQ || suf == R::kK || suf == R::kV || suf == R::kG) return RoleAction{Side::kInput, in_norm};
  if (suf == R::kO || suf == R::kMlpDown || suf == R::kSharedDown) return RoleAction{Side::kOutput, ""};
  if (suf == R::kMlpGate || suf == R::kMlpUp || suf == R::kRouter || suf == R::kSharedGate ||
      suf == R::kSharedUp)
    return RoleAction{Side::kInput, post};
  if (suf == R::kQNorm || suf == R::kKNorm || suf == R::kRouterBias) return RoleAction{Side::kCopy, ""};
  if (suf.starts_with("moe.experts.")) {
    if (suf.ends_with(".down")) return RoleAction{Side::kOutput, ""};
    if (suf.ends_with(".gate") || suf.ends_with(".up")) return RoleAction{Side::kInput, post};
  }
  return err("rotation: weight role '{}' is not handled (refusing rather than guessing)", role);
}

double load_elem(io::DType d, const uint8_t* p) {
  if (d == io::DType::BF16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

void store_elem(io::DType d, uint8_t* p, double v) {
  const float f = static_cast<float>(v);  // double → fp32 → bf16: RNE twice, |error| ≤ one BF16 half-ulp + ε
  if (d == io::DType::BF16) {
    const uint16_t h = f32_to_bf16(f);
    std::memcpy(p, &h, 2);
  } else {
    std::memcpy(p, &f, 4);
  }
}

Expected<std::vector<double>> norm_vector(const model::WeightMap& wm, const std::string& role, int64_t n) {
  const model::WeightRef* ref = wm.find(role);
  if (!ref) return err("rotation: norm '{}' is missing", role);
  if (ref->rows * ref->cols != n)
    return err("rotation: norm '{}' has {} entries, expected {}", role, ref->rows * ref->cols, n);
  std::vector<double> w(static_cast<size_t>(n));
  const size_t es = io::dtype_size(ref->info->dtype);
  for (int64_t i = 0; i < n; ++i)
    w[static_cast<size_t>(i)] = load_elem(ref->info->dtype, ref->data() + i * es);
  return w;
}

Status copy_plain_file(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return err("rotation: cannot copy {} to {}: {}", from.string(), to.string(), ec.message());
  return Status();
}

}  // namespace

Expected<RotateSummary> rotate_checkpoint(const std::string& src, const std::string& dst,
                                          const RotateOptions& o) {
  GRIDQ_ASSIGN_OR_RETURN(model::LoadedModel lm, model::load_model(src));
  const nlohmann::json& cfg = lm.checkpoint->config();
  if (cfg.contains("quantization_config"))
    return err("{}: already quantized (config.json has a quantization_config); rotate a BF16 checkpoint",
               src);
  if (lm.spec.tie_word_embeddings)
    return err("{}: tie_word_embeddings is true: E·Q and lm_head·diag(w)·Q cannot share one tensor", src);
  if (lm.spec.moe.shared_gated) return err("{}: a gated shared expert is not handled by the rotation", src);
  const int n = lm.spec.hidden_size;
  GRIDQ_ASSIGN_OR_RETURN(Rotation rot, make_hadamard_rotation(n, o.seed));
  if (o.threads > 0) omp_set_num_threads(o.threads);

  // tensor name -> the roles that view it (fused expert stacks: several disjoint blocks).
  std::map<std::string, std::vector<std::pair<const model::WeightRef*, RoleAction>>> by_tensor;
  for (const auto& [role, ref] : lm.weights.all()) {
    GRIDQ_ASSIGN_OR_RETURN(RoleAction act, action_for(role));
    by_tensor[ref.tensor].push_back({&ref, act});
  }
  std::error_code ec;
  if (fs::exists(dst, ec)) return err("rotation: {} already exists", dst);
  fs::create_directories(dst, ec);
  if (ec) return err("rotation: cannot create {}: {}", dst, ec.message());

  RotateSummary sum;
  sum.construction = rot.describe();
  for (const auto& file : lm.checkpoint->files()) {
    std::vector<StoredTensor> out;
    for (const io::TensorInfo& ti : file->tensors()) {
      StoredTensor st;
      st.name = ti.name;
      st.dtype = ti.dtype;
      st.shape = ti.shape;
      auto it = by_tensor.find(ti.name);
      if (it == by_tensor.end()) {
        if (ti.name.ends_with("rotary_emb.inv_freq")) {  // RoPE buffers: no adapter reads them
          st.view = ti.bytes();
          ++sum.copied;
          out.push_back(std::move(st));
          continue;
        }
        return err(
            "rotation: tensor '{}' backs no weight role; refusing to guess whether it reads the residual",
            ti.name);
      }
      st.owned.assign(ti.data, ti.data + ti.nbytes());
      int64_t covered = 0;
      for (const auto& [ref, act] : it->second) {
        covered += ref->rows * ref->cols;
        if (act.side == Side::kCopy) {
          ++sum.copied;
          continue;
        }
        if (ti.dtype != io::DType::BF16 && ti.dtype != io::DType::F32)
          return err("rotation: tensor '{}' is {} (BF16 or F32 expected)", ti.name, io::dtype_name(ti.dtype));
        const size_t es = io::dtype_size(ti.dtype);
        uint8_t* base = st.owned.data() + ref->byte_offset();
        const int64_t R = ref->rows, C = ref->cols;
        if (act.side == Side::kNormOnes) {
          for (int64_t i = 0; i < R * C; ++i) store_elem(ti.dtype, base + i * es, 1.0);
          ++sum.norms;
        } else if (act.side == Side::kInput) {  // every row r ← (r ⊙ w)·Q
          if (C != n)
            return err("rotation: '{}' reads the residual but has {} columns (hidden {})", ti.name, C, n);
          std::vector<double> w(static_cast<size_t>(n), 1.0);
          if (!act.norm.empty()) {
            GRIDQ_ASSIGN_OR_RETURN(w, norm_vector(lm.weights, act.norm, n));
          }
#pragma omp parallel
          {
            std::vector<double> v(static_cast<size_t>(n));
#pragma omp for schedule(static)
            for (int64_t r = 0; r < R; ++r) {
              uint8_t* row = base + static_cast<size_t>(r * C) * es;
              for (int64_t c = 0; c < C; ++c)
                v[static_cast<size_t>(c)] = load_elem(ti.dtype, row + c * es) * w[static_cast<size_t>(c)];
              rot.apply(v.data());
              for (int64_t c = 0; c < C; ++c) store_elem(ti.dtype, row + c * es, v[static_cast<size_t>(c)]);
            }
          }
          ++sum.input_side;
        } else {  // every column c ← Qᵀ·c
          if (R != n)
            return err("rotation: '{}' writes the residual but has {} rows (hidden {})", ti.name, R, n);
#pragma omp parallel
          {
            std::vector<double> v(static_cast<size_t>(n));
#pragma omp for schedule(static)
            for (int64_t c = 0; c < C; ++c) {
              for (int64_t r = 0; r < R; ++r)
                v[static_cast<size_t>(r)] = load_elem(ti.dtype, base + static_cast<size_t>(r * C + c) * es);
              rot.apply(v.data());
              for (int64_t r = 0; r < R; ++r)
                store_elem(ti.dtype, base + static_cast<size_t>(r * C + c) * es, v[static_cast<size_t>(r)]);
            }
          }
          ++sum.output_side;
        }
      }
      if (covered != ti.numel())
        return err("rotation: the weight roles cover {} of the {} elements of '{}'", covered, ti.numel(),
                   ti.name);
      out.push_back(std::move(st));
    }
    const fs::path name = fs::path(file->path()).filename();
    GRIDQ_RETURN_IF_ERROR(write_shard((fs::path(dst) / name).string(), out).status());
  }
  // Everything else (config, index, tokenizer, chat template, generation config) as is.
  for (const auto& entry : fs::directory_iterator(src, ec)) {
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors") continue;
    GRIDQ_RETURN_IF_ERROR(copy_plain_file(entry.path(), fs::path(dst) / entry.path().filename()));
  }
  if (ec) return err("rotation: cannot list {}: {}", src, ec.message());
  return sum;
}

}  // namespace gridq::quant
