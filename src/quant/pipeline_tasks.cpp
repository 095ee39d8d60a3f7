// The per-layer half of the quantize driver (pipeline.h): resolving the plan into tasks (method, budget and
// codebook overrides, layer and role of every tensor), finding each Linear's captured input, and encoding one
// layer's tensors (and, with --budget-bpw, every priced option of its budget units). Kept apart from the
// streamer so tests can drive it with synthetic statistics.
#include <algorithm>
#include <chrono>

#include "core/async.h"
#include "quant/pipeline.h"

namespace gridq::quant {

using nlohmann::json;

namespace {

// "layers.3.attn.q" -> 3 and "attn.q"; false for non-layer roles.
bool split_layer_role(const std::string& role, int* layer, std::string* suffix) {
  if (!role.starts_with("layers.")) return false;
  const size_t dot = role.find('.', 7);
  if (dot == std::string::npos) return false;
  *layer = std::stoi(role.substr(7, dot - 7));
  *suffix = role.substr(dot + 1);
  return true;
}

bool is_attention_member(const std::string& unit) {
  return unit.ends_with("self_attn.qkv_proj") || unit.ends_with("self_attn.o_proj");
}
bool is_routed_stack(const std::string& unit) { return unit.ends_with(".experts"); }

int64_t tensor_bytes(const std::vector<StoredTensor>& ts) {
  int64_t b = 0;
  for (const StoredTensor& t : ts) b += static_cast<int64_t>(t.bytes().size());
  return b;
}

// Attaches the S4 value of each encoded Linear's input.
void attach_identity(const LayerCapture* cap, std::vector<EncodedTensor>& encs) {
  if (!cap) return;
  for (EncodedTensor& e : encs) {
    for (const IdentityCheck& c : cap->checks) {
      if (!e.stats.input.empty() && c.input == e.stats.input) {
        e.stats.identity = c.value;
        e.stats.identity_kind = c.kind;
        break;
      }
    }
  }
}

}  // namespace

// Exact stored bits of one [R, C] Linear in `format` (what assemble_tensors writes): the budget's bits are
// known from the plan alone, so an infeasible budget fails before any weight is read.
Expected<int64_t> stored_bits(const std::string& format, int64_t R, int64_t C) {
  if (format == "BF16") return 16 * R * C;
  if (format == "FP8_DYNAMIC") return 8 * (R * C + 4 * R);
  GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(format, 2));
  return 8 * (R * gridbook::row_bytes(r, C) + (r.grid == gridbook::Grid::FP8 ? 4 * R : 0));
}

std::string encoder_for(const std::string& format, const std::string& rule_encoder,
                        const std::string& method) {
  if (format == "BF16") return "copy";
  if (method == "rtn") return "rtn";
  if (method == "cb-gptq") return "cb_gptq";
  if (!rule_encoder.empty()) return rule_encoder;
  return format == "FP8_DYNAMIC" ? "rtn" : "cb_gptq";
}

Expected<SourceWeight> source_weight(const io::Checkpoint& ckpt, const std::string& name) {
  const io::TensorInfo* t = ckpt.find(name);
  if (!t) return err("source tensor '{}' is missing from the checkpoint", name);
  return SourceWeight{name, t->dtype, t->shape, t->bytes()};
}

// ---------------------------------------------------------------------------------------------------------
// Resolution

std::vector<std::string> budget_options(const TensorTask& t, const QuantizeOptions& o) {
  if (!(o.budget_bpw > 0.0)) return {};
  if (is_routed_stack(t.unit)) return o.budget_formats;
  if (o.budget_attention && is_attention_member(t.unit)) return {"FP8_DYNAMIC", "BF16"};
  return {};
}

Expected<std::vector<TensorTask>> resolve_tasks(const Recipe& recipe, const Plan& plan,
                                                const model::LoadedModel& model, const QuantizeOptions& o) {
  if (!o.method.empty() && o.method != "cb-gptq" && o.method != "rtn")
    return err("--method '{}': expected cb-gptq or rtn", o.method);
  // Roles by tensor: a tensor that backs exactly one 2-D role gets it (fused source stacks back several).
  std::map<std::string, std::vector<std::string>> roles;
  for (const auto& [role, ref] : model.weights.all()) roles[ref.tensor].push_back(role);

  std::vector<TensorTask> tasks;
  for (const PlannedTensor& p : plan.tensors) {
    const RecipeRule& rule = recipe.rules[static_cast<size_t>(p.rule)];
    TensorTask t;
    t.name = p.name;
    t.rule = p.rule;
    t.format = p.format;
    t.unit = p.unit;
    auto it = roles.find(p.name);
    if (it != roles.end() && it->second.size() == 1) t.role = it->second.front();
    int layer = -1;
    std::string suffix;
    if (!t.role.empty() && split_layer_role(t.role, &layer, &suffix)) {
      t.layer = layer;
    } else {
      t.layer = layer_of_name(p.name);
    }
    if (t.layer >= model.spec.n_layers)
      return err("tensor '{}': layer {} is beyond the model's {} layers", p.name, t.layer,
                 model.spec.n_layers);
    t.params.cb_gptq = recipe.cb_gptq;
    t.params.two_tier = recipe.two_tier;
    t.params.format = t.format;
    t.params.device_encode = o.device == "cuda";
    t.rule_encoder = rule.format == "BF16" ? std::string() : rule.encoder;
    t.method = o.method;
    t.params.encoder = encoder_for(t.format, t.rule_encoder, t.method);
    t.options = budget_options(t, o);
    t.budget = !t.options.empty();
    for (const std::string& f : t.options) {
      if (f != "BF16" && f != "FP8_DYNAMIC" && !is_cb_format(f))
        return err("--budget-formats: '{}' is not a format (BF16, FP8_DYNAMIC, NVFP4_CB_K*, FP8_CB_K*)", f);
      if (is_cb_format(f)) {
        GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, gridbook::parse_rung_name(f, 2));
        const io::TensorInfo* ti = model.checkpoint->find(p.name);
        if (ti->shape.size() != 2 || ti->shape[1] % 256 != 0 ||
            (r.grid == gridbook::Grid::FP4 && ti->shape[0] % 8 != 0))
          return err("--budget-bpw: tensor '{}' (shape [{}]) cannot be {} (C % 256 == 0, NVFP4 R % 8 == 0)",
                     p.name, fmt::join(ti->shape, ", "), f);
      }
    }
    if (t.format != "BF16" || t.budget) {
      if (it != roles.end() && it->second.size() > 1)
        return err(
            "tensor '{}' ({}): it stores {} Linears (a fused source stack); only BF16 copies of fused source "
            "stacks are implemented",
            p.name, t.format, it->second.size());
      if (t.role.empty() || t.layer < 0)
        return err(
            "tensor '{}' ({}): no calibration input is captured for it (only decoder-layer Linears can be "
            "quantized; embeddings, lm_head and norms must be BF16)",
            p.name, t.format);
      if (t.format != "BF16" && is_cb_format(t.format)) {
        GRIDQ_ASSIGN_OR_RETURN(gridbook::Rung r, rule_rung(rule));
        if (r.grid == gridbook::Grid::FP4 && r.layout_version != 2)
          return err(
              "tensor '{}': rule {} asks for {} with v1 scale coding; gridq's encoder writes two_tier (v2) "
              "only",
              p.name, p.rule, t.format);
      }
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

Expected<const InputStats*> input_for_role(const LayerCapture& cap, const std::string& role) {
  int layer = -1;
  std::string s;
  if (!split_layer_role(role, &layer, &s)) return static_cast<const InputStats*>(nullptr);
  if (layer != cap.layer) return err("role '{}' is not in layer {} (its capture)", role, cap.layer);
  if (s == "attn.q" || s == "attn.k" || s == "attn.v" || s == "attn.g") return &cap.attn_in;
  if (s == "attn.o") return &cap.o_in;
  if (s == "mlp.gate" || s == "mlp.up" || s == "moe.router" || s == "moe.shared.gate" || s == "moe.shared.up")
    return &cap.mlp_in;
  if (s == "mlp.down") return &cap.dense_down_in;
  if (s == "moe.shared.down") return &cap.shared_down_in;
  if (s.starts_with("moe.experts.")) {
    const size_t dot = s.find('.', 12);
    const int e = std::stoi(s.substr(12, dot - 12));
    const std::string proj = s.substr(dot + 1);
    const auto& v = proj == "down" ? cap.expert_down_in : cap.expert_in;
    if (e < 0 || static_cast<size_t>(e) >= v.size())
      return err("role '{}': layer {} captured {} experts", role, cap.layer, v.size());
    return &v[static_cast<size_t>(e)];
  }
  return static_cast<const InputStats*>(nullptr);  // norms, router bias: not Linears
}

// The codebook of a CB format (nullptr for the others).
Expected<const gridbook::Codebook*> codebook_for(const std::map<std::string, gridbook::Codebook>& codebooks,
                                                 const std::string& format, const std::string& tensor) {
  if (!is_cb_format(format)) return static_cast<const gridbook::Codebook*>(nullptr);
  auto it = codebooks.find(format);
  if (it == codebooks.end()) it = codebooks.find(book_key(format, layer_of_name(tensor)));
  if (it == codebooks.end()) return err("tensor '{}': no codebook for {}", tensor, format);
  return &it->second;
}

Expected<std::vector<EncodedTensor>> encode_layer_tensors(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture* cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string&)>& on_tensor, EncodeSeconds* secs) {
  using Encoded = std::map<size_t, EncodedTensor>;  // by task index
  // The CPU encodings of the layer's tasks that `pick` selects (report: progress per tensor).
  auto encode_here = [&](auto pick, bool report) -> Expected<Encoded> {
    Encoded r;
    for (size_t i = 0; i < tasks.size(); ++i) {
      const TensorTask& t = tasks[i];
      if (t.layer != layer || t.budget || !pick(i, t)) continue;
      if (report && on_tensor) on_tensor(t.name);
      GRIDQ_ASSIGN_OR_RETURN(SourceWeight w, source_weight(ckpt, t.name));
      const InputStats* in = nullptr;
      if (t.format != "BF16") {
        if (!cap) return err("tensor '{}' ({}): no capture for layer {}", t.name, t.format, layer);
        GRIDQ_ASSIGN_OR_RETURN(in, input_for_role(*cap, t.role));
        if (!in)
          return err("tensor '{}' (role {}): not a Linear with a captured input; it must be BF16", t.name,
                     t.role);
      }
      GRIDQ_ASSIGN_OR_RETURN(const gridbook::Codebook* cb, codebook_for(codebooks, t.format, t.name));
      auto enc = encode_tensor(w, in, t.params, cb);
      if (!enc.ok()) return err("layer {}: {}: {}", layer, t.name, enc.message());
      r.emplace(i, std::move(*enc));
    }
    return r;
  };
  auto timed = [secs](auto f) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = f();
    if (secs) secs->other += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  Encoded done;
  if (cap && std::any_of(tasks.begin(), tasks.end(),
                         [&](const TensorTask& t) { return t.layer == layer && t.params.device_encode; })) {
    // --device cuda: the routed experts go to the GPU a chunk per device call, while the other tensors
    // (attention's FP8, the BF16 copies: CPU work) are encoded beside them on a second thread, since the
    // experts' host side mostly waits on the device. Each encoding is a pure function of its inputs, so the
    // bytes do not depend on the overlap. (Routed experts the batch does not take are encoded after it.)
    auto rest = async_like_caller([&] {
      return timed([&] {
        return encode_here([](size_t, const TensorTask& t) { return !is_routed_expert_role(t.role); }, false);
      });
    });
    auto batched = encode_experts_on_device(tasks, layer, *cap, ckpt, codebooks, on_tensor, secs);
    auto others = rest.get();
    if (!batched.ok()) return batched.status();
    if (!others.ok()) return others.status();
    done = std::move(*batched);
    done.merge(*others);
  }
  // Everything not encoded yet (every task on the CPU path), in task order.
  GRIDQ_ASSIGN_OR_RETURN(
      Encoded here,
      timed([&] { return encode_here([&](size_t i, const TensorTask&) { return !done.count(i); }, true); }));
  done.merge(here);
  std::vector<EncodedTensor> out;
  out.reserve(done.size());
  for (auto& [i, e] : done) out.push_back(std::move(e));
  attach_identity(cap, out);
  return out;
}

Expected<std::vector<BudgetUnit>> encode_budget_units(
    const std::vector<TensorTask>& tasks, int layer, const LayerCapture& cap, const io::Checkpoint& ckpt,
    const std::map<std::string, gridbook::Codebook>& codebooks,
    const std::function<void(const std::string&, const std::string&)>& on_tensor) {
  std::map<std::string, std::vector<const TensorTask*>> units;  // sorted by unit name
  for (const TensorTask& t : tasks)
    if (t.layer == layer && t.budget) units[t.unit].push_back(&t);
  std::vector<BudgetUnit> out;
  for (const auto& [unit, members] : units) {
    BudgetUnit bu;
    bu.unit = unit;
    for (const TensorTask* t : members) {
      const io::TensorInfo* ti = ckpt.find(t->name);
      if (!ti) return err("source tensor '{}' is missing from the checkpoint", t->name);
      bu.params += ti->numel();
    }
    // Members outer, options inner: each source weight is read and converted to fp32 once, not once per
    // option.
    const std::vector<std::string>& formats = members.front()->options;
    std::vector<std::vector<EncodedTensor>> encs(formats.size());  // [option][member]
    for (const TensorTask* t : members) {
      GRIDQ_ASSIGN_OR_RETURN(SourceWeight w, source_weight(ckpt, t->name));
      GRIDQ_ASSIGN_OR_RETURN(const InputStats* in, input_for_role(cap, t->role));
      if (!in) return err("tensor '{}' (role {}): no captured input to price its options", t->name, t->role);
      GRIDQ_ASSIGN_OR_RETURN(const std::vector<float> W32, source_to_f32(w));
      for (size_t k = 0; k < formats.size(); ++k) {
        const std::string& f = formats[k];
        if (on_tensor) on_tensor(f, t->name);
        EncodeParams p = t->params;
        p.format = f;
        p.encoder = encoder_for(f, t->rule_encoder, t->method);
        GRIDQ_ASSIGN_OR_RETURN(const gridbook::Codebook* cb, codebook_for(codebooks, f, t->name));
        auto enc = encode_tensor(w, f == "BF16" ? nullptr : in, p, cb, &W32);
        if (!enc.ok()) return err("layer {}: {} as {}: {}", layer, t->name, f, enc.message());
        if (f == "BF16") enc->stats.input = in->name;  // kept as is: cost 0, the record still names the input
        encs[k].push_back(std::move(*enc));
      }
    }
    for (size_t k = 0; k < formats.size(); ++k) {
      BudgetOption op;
      op.format = formats[k];
      for (const EncodedTensor& e : encs[k]) op.half_trace += e.stats.half_trace;
      attach_identity(&cap, encs[k]);
      for (const EncodedTensor& e : encs[k]) op.stats[e.stats.tensor] = e.stats.to_json();
      GRIDQ_ASSIGN_OR_RETURN(ShardContent oc, assemble_tensors(std::move(encs[k])));
      op.bits = tensor_bytes(oc.tensors) * 8;
      op.tensors = std::move(oc.tensors);
      op.cb_slices = std::move(oc.cb_slices);
      bu.options.push_back(std::move(op));
    }
    out.push_back(std::move(bu));
  }
  return out;
}

}  // namespace gridq::quant
