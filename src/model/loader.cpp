#include "model/loader.h"

#include "model/config_check.h"

namespace gridq::model {

TensorTable tensor_table(const io::Checkpoint& ckpt) {
  TensorTable t;
  for (const auto& f : ckpt.files())
    for (const auto& info : f->tensors()) t[info.name] = &info;
  return t;
}

namespace {
Expected<Adapted> adapt_architecture(const nlohmann::json& config, const TensorTable& tensors) {
  auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
    return err("config.json: 'architectures' missing or empty");
  if (it->size() != 1) return err("config.json: 'architectures' lists {} entries (expected 1)", it->size());
  const std::string arch = (*it)[0].get<std::string>();
  if (arch == "LagunaForCausalLM") return adapt_laguna(config, tensors);
  if (arch == "Qwen3MoeForCausalLM") return adapt_qwen3_moe(config, tensors);
  if (arch == "LlamaForCausalLM" || arch == "Qwen3ForCausalLM") return adapt_llama(config, tensors);
  return err(
      "config.json: architecture '{}' is not supported (supported: LagunaForCausalLM, Qwen3MoeForCausalLM, "
      "LlamaForCausalLM, Qwen3ForCausalLM)",
      arch);
}
}  // namespace

// Every value is range-checked before an adapter reads it (an adapter divides by head counts and narrows to
// int) and the result once more, whatever the architecture.
Expected<Adapted> adapt(const nlohmann::json& config, const TensorTable& tensors) {
  GRIDQ_RETURN_IF_ERROR(check_config_values(config));
  GRIDQ_ASSIGN_OR_RETURN(Adapted a, adapt_architecture(config, tensors));
  GRIDQ_RETURN_IF_ERROR(check_spec(a.spec));
  return a;
}

Expected<LoadedModel> load_model(const std::string& dir) {
  GRIDQ_ASSIGN_OR_RETURN(auto ckpt, io::Checkpoint::open(dir));
  GRIDQ_ASSIGN_OR_RETURN(Adapted a, adapt(ckpt->config(), tensor_table(*ckpt)));
  LoadedModel m;
  m.spec = std::move(a.spec);
  m.weights = std::move(a.weights);
  m.checkpoint = std::move(ckpt);
  return m;
}

}  // namespace gridq::model
