#include "quant/export.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "core/numerics.h"
#include "gridbook/artifact.h"
#include "gridbook/matching.h"
#include "gridbook/sidecar.h"
#include "io/checkpoint.h"
#include "io/pins.h"
#include "io/sha256.h"
#include "quant/book_keys.h"

namespace gridq::quant {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Files of a Hugging Face model directory that describe text handling, copied verbatim when present.
constexpr const char* kCopiedFiles[] = {"tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json",
                                        "vocab.json",
                                        "merges.txt",
                                        "tokenizer.model",
                                        "chat_template.jinja",
                                        "chat_template.json",
                                        "generation_config.json"};

std::string strip_weight(const std::string& name) {
  return name.ends_with(".weight") ? name.substr(0, name.size() - 7) : name;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status write_file_atomic(const fs::path& path, std::string_view bytes) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("{}: cannot create", tmp.string());
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) return err("{}: write failed", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return err("{}: cannot rename into place: {}", path.string(), ec.message());
  return Status();
}

Status write_json(const fs::path& path, const json& j) { return write_file_atomic(path, j.dump(2) + "\n"); }

bool is_cb(const std::string& format) { return is_cb_format(format); }

struct Stack {
  std::string prefix;                                    // "<p>.experts"
  std::map<int, std::array<EncodedTensor*, 3>> experts;  // e -> gate, up, down
};

}  // namespace

json CbSlice::to_json() const {
  json j = {{"source", source},
            {"tensor", tensor},
            {"row0", row0},
            {"rows", rows},
            {"cols", cols},
            {"rung", rung},
            {"w_hat_bf16_sha256", w_hat_sha256}};
  if (!scale_tensor.empty()) j["scale_tensor"] = scale_tensor;
  return j;
}

Expected<CbSlice> CbSlice::from_json(const json& j) {
  try {
    CbSlice s;
    s.source = j.at("source").get<std::string>();
    s.tensor = j.at("tensor").get<std::string>();
    s.scale_tensor = j.value("scale_tensor", std::string());
    s.row0 = j.at("row0").get<int64_t>();
    s.rows = j.at("rows").get<int64_t>();
    s.cols = j.at("cols").get<int64_t>();
    s.rung = j.at("rung").get<std::string>();
    s.w_hat_sha256 = j.at("w_hat_bf16_sha256").get<std::string>();
    return s;
  } catch (const std::exception& e) {
    return err("CB slice record: {}", e.what());
  }
}

std::string shard_file_name(int index, int count) {
  return fmt::format("model-{:05}-of-{:05}.safetensors", index + 1, count);
}

std::string artifact_module_name(const std::string& source_tensor, const std::string& format) {
  const std::string m = strip_weight(source_tensor);
  if (!is_cb(format)) return m;
  auto re = gridbook::parse_routed_expert(m);
  if (!re || !re->expert) return m;
  return re->experts_prefix + (re->leaf == "down_proj" ? ".down_proj" : ".gate_up_proj");
}

Expected<ShardContent> assemble_tensors(std::vector<EncodedTensor> encoded) {
  ShardContent out;
  std::map<std::string, Stack> stacks;
  std::sort(encoded.begin(), encoded.end(),
            [](const EncodedTensor& a, const EncodedTensor& b) { return a.stats.tensor < b.stats.tensor; });
  // The S7 digest of every CB tensor's Ŵ first, in parallel (a MoE layer has hundreds of them, each a few MB
  // to hash); sha[i] belongs to encoded[i].
  std::vector<std::string> sha(encoded.size());
  const auto n_enc = static_cast<int64_t>(encoded.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n_enc; ++i)
    if (encoded[static_cast<size_t>(i)].rung)
      sha[static_cast<size_t>(i)] = w_hat_bf16_sha256(encoded[static_cast<size_t>(i)].w_hat);
  auto sha_of = [&](const EncodedTensor* t) -> const std::string& {
    return sha[static_cast<size_t>(t - encoded.data())];
  };
  for (EncodedTensor& e : encoded) {
    const std::string& name = e.stats.tensor;
    const std::string module = strip_weight(name);
    if (e.format == "BF16") {
      out.tensors.push_back({name, e.dtype, e.shape, std::move(e.data), {}});
      continue;
    }
    if (!name.ends_with(".weight"))
      return err("tensor '{}': a quantized Linear must be stored as '<module>.weight' in the source", name);
    if (e.format == "FP8_DYNAMIC") {
      out.tensors.push_back(
          {module + ".weight", io::DType::F8_E4M3, {e.rows, e.cols}, std::move(e.data), {}});
      out.tensors.push_back({module + ".weight_scale", io::DType::F32, {e.rows, 1}, f32_bytes(e.scale), {}});
      continue;
    }
    if (!e.rung) return err("tensor '{}': {} encoding carries no rung", name, e.format);
    auto re = gridbook::parse_routed_expert(module);
    if (re && re->expert) {
      int slot = -1;
      if (re->leaf == "gate_proj") slot = 0;
      if (re->leaf == "up_proj") slot = 1;
      if (re->leaf == "down_proj") slot = 2;
      if (slot < 0)
        return err("tensor '{}': per-expert '{}' cannot be stacked (gate_proj, up_proj and down_proj only)",
                   name, re->leaf);
      Stack& s = stacks[re->experts_prefix];
      s.prefix = re->experts_prefix;
      auto& roles = s.experts[*re->expert];
      if (roles[slot]) return err("tensor '{}': routed expert role encoded twice", name);
      roles[slot] = &e;
      continue;
    }
    const std::string q = module + ".cb_qweight";
    const int64_t rb = gridbook::row_bytes(*e.rung, e.cols);
    CbSlice sl{name, q, "", 0, e.rows, e.cols, e.rung->name(), sha_of(&e)};
    out.tensors.push_back({q, io::DType::U8, {e.rows, rb}, std::move(e.data), {}});
    if (e.rung->grid == gridbook::Grid::FP8) {
      sl.scale_tensor = module + ".weight_scale";
      out.tensors.push_back({sl.scale_tensor, io::DType::F32, {e.rows}, f32_bytes(e.scale), {}});
    }
    out.cb_slices.push_back(std::move(sl));
    std::vector<float>().swap(e.w_hat);
  }

  for (auto& [prefix, s] : stacks) {
    const int64_t E = static_cast<int64_t>(s.experts.size());
    if (s.experts.begin()->first != 0 || s.experts.rbegin()->first != E - 1)
      return err(
          "routed experts '{}': experts {}..{} encoded but a stack needs every expert 0..E-1 ({} present)",
          prefix, s.experts.begin()->first, s.experts.rbegin()->first, E);
    const EncodedTensor* g0 = s.experts.begin()->second[0];
    const EncodedTensor* d0 = s.experts.begin()->second[2];
    if (!g0 || !d0) return err("routed experts '{}': expert 0 lacks gate_proj or down_proj", prefix);
    const gridbook::Rung rung = *g0->rung;
    const int64_t I = g0->rows, Hc = g0->cols;
    for (const auto& [ei, roles] : s.experts) {
      static constexpr const char* kLeaf[3] = {"gate_proj", "up_proj", "down_proj"};
      for (int r = 0; r < 3; ++r) {
        const EncodedTensor* t = roles[r];
        if (!t)
          return err("routed experts '{}': expert {} has no {} (a CB stack needs all three roles)", prefix,
                     ei, kLeaf[r]);
        if (t->format != g0->format || !(*t->rung == rung))
          return err(
              "routed experts '{}': expert {} {} is {} but expert 0 gate_proj is {} (one scheme per stack)",
              prefix, ei, kLeaf[r], t->format, g0->format);
        const int64_t want_r = r < 2 ? I : Hc, want_c = r < 2 ? Hc : I;
        if (t->rows != want_r || t->cols != want_c)
          return err("routed experts '{}': expert {} {} is [{}, {}], expected [{}, {}]", prefix, ei, kLeaf[r],
                     t->rows, t->cols, want_r, want_c);
      }
    }
    const bool fp8 = rung.grid == gridbook::Grid::FP8;
    const int64_t rb_gu = gridbook::row_bytes(rung, Hc), rb_d = gridbook::row_bytes(rung, I);
    StoredTensor gu{prefix + ".gate_up_proj.cb_qweight", io::DType::U8, {E, 2 * I, rb_gu}, {}, {}};
    StoredTensor dn{prefix + ".down_proj.cb_qweight", io::DType::U8, {E, Hc, rb_d}, {}, {}};
    gu.owned.reserve(static_cast<size_t>(E * 2 * I * rb_gu));
    dn.owned.reserve(static_cast<size_t>(E * Hc * rb_d));
    std::vector<float> gu_scale, dn_scale;
    for (auto& [ei, roles] : s.experts) {
      for (int r = 0; r < 3; ++r) {
        EncodedTensor* t = roles[r];
        StoredTensor& dst = r < 2 ? gu : dn;
        const int64_t row0 = r < 2 ? ei * 2 * I + (r == 1 ? I : 0) : ei * Hc;
        CbSlice sl{t->stats.tensor, dst.name, "", row0, t->rows, t->cols, rung.name(), sha_of(t)};
        if (fp8) {
          sl.scale_tensor =
              r < 2 ? prefix + ".gate_up_proj.weight_scale" : prefix + ".down_proj.weight_scale";
          auto& sc = r < 2 ? gu_scale : dn_scale;
          sc.insert(sc.end(), t->scale.begin(), t->scale.end());
        }
        out.cb_slices.push_back(std::move(sl));
        dst.owned.insert(dst.owned.end(), t->data.begin(), t->data.end());
        std::vector<uint8_t>().swap(t->data);
        std::vector<float>().swap(t->w_hat);
      }
    }
    out.tensors.push_back(std::move(gu));
    out.tensors.push_back(std::move(dn));
    if (fp8) {
      out.tensors.push_back(
          {prefix + ".gate_up_proj.weight_scale", io::DType::F32, {E, 2 * I}, f32_bytes(gu_scale), {}});
      out.tensors.push_back(
          {prefix + ".down_proj.weight_scale", io::DType::F32, {E, Hc}, f32_bytes(dn_scale), {}});
    }
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const StoredTensor& a, const StoredTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < out.tensors.size(); ++i) {
    if (out.tensors[i].name == out.tensors[i - 1].name)
      return err("stored tensor '{}' would be written twice (two sources map to one name)",
                 out.tensors[i].name);
  }
  std::sort(out.cb_slices.begin(), out.cb_slices.end(),
            [](const CbSlice& a, const CbSlice& b) { return a.source < b.source; });
  return out;
}

Expected<std::string> write_shard(const std::string& path, const std::vector<StoredTensor>& tensors) {
  std::vector<io::SafetensorsWriter::Decl> decls;
  decls.reserve(tensors.size());
  for (const StoredTensor& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
  GRIDQ_ASSIGN_OR_RETURN(auto w, io::SafetensorsWriter::create(path, std::move(decls), {{"format", "pt"}}));
  for (const StoredTensor& t : tensors) GRIDQ_RETURN_IF_ERROR(w->write(t.bytes()));
  GRIDQ_RETURN_IF_ERROR(w->finish());
  return io::sha256_file(path);
}

Expected<QuantConfigOut> build_quant_config(const ExportInfo& info) {
  std::set<std::string> ignore, fp8_targets;
  std::map<std::string, std::set<std::string>> cb_targets;  // book key (book_keys.h) -> modules
  std::map<std::string, std::string> module_format;
  for (const auto& [tensor, format] : info.tensor_formats) {
    const std::string m = artifact_module_name(tensor, format);
    auto [it, fresh] = module_format.emplace(m, format);
    if (!fresh && it->second != format)
      return err("module '{}' would be stored as both {} and {} (tensor '{}'; one scheme per module)", m,
                 it->second, format, tensor);
    if (format == "BF16") {
      ignore.insert(m);
    } else if (format == "FP8_DYNAMIC") {
      fp8_targets.insert(m);
    } else if (is_cb(format)) {
      const std::string key = book_key_for(info.codebook_source, format, m);
      if (!info.codebooks.count(key)) return err("module '{}': no codebook given for {}", m, key);
      cb_targets[key].insert(m);
    } else {
      return err("tensor '{}': format '{}' cannot be exported", tensor, format);
    }
  }
  QuantConfigOut out;
  gridbook::QuantConfig& qc = out.config;
  bool any_fp4 = false, any_fp8cb = false;
  const bool per_layer = info.codebook_source == kPerLayerBooks;
  for (const auto& [key, targets] : cb_targets) {
    const gridbook::Codebook& cb = info.codebooks.at(key);
    const gridbook::Rung& rung = cb.rung;
    const std::string format = book_format(key);
    (rung.grid == gridbook::Grid::FP4 ? any_fp4 : any_fp8cb) = true;
    // Per-layer books: a group per (rung, layer), its tables named after the layer (book_keys.h).
    const int layer = per_layer ? layer_of_name(*targets.begin()) : -1;
    const std::string ref = book_ref(info.codebook_source, layer);
    gridbook::CbScheme scheme = gridbook::make_cb_scheme(rung, "cb_codebook." + ref);
    scheme.codebook_source = info.codebook_source == "lattice" ? "lattice" : "learned";  // format.md §11
    qc.groups.push_back({per_layer ? fmt::format("{}_l{}", lower(format), layer) : lower(format),
                         std::vector<std::string>(targets.begin(), targets.end()), format, scheme});
    std::vector<gridbook::CodebookTable> tables = codebook_tables(cb, ref);
    for (size_t i = 0; i < tables.size(); ++i)
      if (tables[i].name != scheme.codebook_ref[i])
        return err("codebook table name '{}' does not match the scheme's ref '{}'", tables[i].name,
                   scheme.codebook_ref[i]);
    for (gridbook::CodebookTable& t : tables) out.tables.push_back(std::move(t));
  }
  if (!fp8_targets.empty())
    qc.groups.push_back({"fp8_dynamic", std::vector<std::string>(fp8_targets.begin(), fp8_targets.end()),
                         "float-quantized", std::nullopt});
  std::sort(qc.groups.begin(), qc.groups.end(),
            [](const gridbook::ConfigGroup& a, const gridbook::ConfigGroup& b) { return a.name < b.name; });
  qc.format = any_fp4 ? "nvfp4_cb" : any_fp8cb ? "fp8_cb" : !fp8_targets.empty() ? "float-quantized" : "bf16";
  qc.ignore.assign(ignore.begin(), ignore.end());
  if (!out.tables.empty()) {
    std::sort(
        out.tables.begin(), out.tables.end(),
        [](const gridbook::CodebookTable& a, const gridbook::CodebookTable& b) { return a.name < b.name; });
    qc.codebook_sha256 = gridbook::codebook_digests(out.tables);
  }
  json prov = info.provenance.is_object() ? info.provenance : json::object();
  if (!cb_targets.empty()) prov["codebook_source"] = info.codebook_source;
  json tf = json::object();
  for (const auto& [m, f] : module_format) tf[m] = f;
  prov["tensor_formats"] = std::move(tf);
  qc.provenance_extra = std::move(prov);
  return out;
}

Status write_artifact_metadata(const std::string& dir, const ExportInfo& info) {
  // Index: every tensor of every shard, from the shards' own headers.
  json weight_map = json::object();
  uint64_t total = 0;
  for (const std::string& shard : info.shard_files) {
    GRIDQ_ASSIGN_OR_RETURN(auto f, io::SafetensorsFile::open((fs::path(dir) / shard).string()));
    for (const io::TensorInfo& t : f->tensors()) {
      if (weight_map.contains(t.name))
        return err("tensor '{}' is in two shards ({} and {})", t.name, weight_map[t.name].get<std::string>(),
                   shard);
      weight_map[t.name] = shard;
      total += t.nbytes();
    }
  }
  GRIDQ_RETURN_IF_ERROR(write_json(fs::path(dir) / "model.safetensors.index.json",
                                   json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}));

  GRIDQ_ASSIGN_OR_RETURN(QuantConfigOut qc, build_quant_config(info));
  gridbook::QuantizationStub stub;
  stub.format = qc.config.format;
  if (!info.source_config.is_object()) return err("source config.json is not a JSON object");
  if (info.source_config.contains("quantization_config"))
    return err("source config.json already has a quantization_config; quantize a BF16 checkpoint");
  json cfg = info.source_config;
  cfg["quantization_config"] = gridbook::emit_quantization_stub(stub);
  GRIDQ_RETURN_IF_ERROR(write_json(fs::path(dir) / "config.json", cfg));
  GRIDQ_RETURN_IF_ERROR(write_json(fs::path(dir) / stub.config_file, gridbook::emit_quant_config(qc.config)));
  if (!qc.tables.empty())
    GRIDQ_RETURN_IF_ERROR(gridbook::write_sidecar((fs::path(dir) / stub.codebook_file).string(), qc.tables));

  for (const char* name : kCopiedFiles) {
    const fs::path src = fs::path(info.source_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(src, ec)) continue;
    std::ifstream in(src, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return err("{}: read failed", src.string());
    GRIDQ_RETURN_IF_ERROR(write_file_atomic(fs::path(dir) / name, bytes));
  }
  return Status();
}

}  // namespace gridq::quant
