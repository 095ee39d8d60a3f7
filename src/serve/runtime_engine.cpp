#include "serve/runtime_engine.h"

namespace gridq::serve {

RuntimeEngine::RuntimeEngine(std::unique_ptr<runtime::Engine> eng, int64_t max_model_len)
    : eng_(std::move(eng)), max_len_(max_model_len) {}

Expected<std::unique_ptr<RuntimeEngine>> RuntimeEngine::create(std::unique_ptr<runtime::Engine> eng,
                                                               int64_t max_model_len, bool prefix_caching) {
  GRIDQ_RETURN_IF_ERROR(eng->backend().set_prefix_caching(prefix_caching));
  std::unique_ptr<RuntimeEngine> r(new RuntimeEngine(std::move(eng), max_model_len));
  r->prefix_caching_ = prefix_caching;
  return r;
}

int32_t RuntimeEngine::vocab_size() const { return eng_->vocab_size(); }

runtime::KvPageStats RuntimeEngine::kv_pages() const {
  std::lock_guard lk(mu_);
  return eng_->backend().kv_pages();
}

int64_t RuntimeEngine::kv_pages_needed(SeqId id, int64_t new_len) const {
  std::lock_guard lk(mu_);
  auto it = ids_.find(id);
  if (it == ids_.end()) return eng_->backend().kv_pages_needed(-1, new_len);
  return eng_->backend().kv_pages_needed(it->second, new_len);
}

Expected<runtime::PrefixHit> RuntimeEngine::attach_prefix(SeqId id, std::span<const int32_t> tokens) {
  std::lock_guard lk(mu_);
  auto it = ids_.find(id);
  if (it == ids_.end()) return err("serve engine: attach_prefix on unknown sequence {}", id);
  if (!prefix_caching_) return runtime::PrefixHit{};
  return eng_->backend().attach_prefix(it->second, tokens);
}

Status RuntimeEngine::add_sequence(SeqId id) {
  std::lock_guard lk(mu_);
  if (ids_.count(id)) return err("serve engine: sequence {} already exists", id);
  ids_[id] = eng_->create_sequence();
  return {};
}

void RuntimeEngine::remove_sequence(SeqId id) {
  std::lock_guard lk(mu_);
  auto it = ids_.find(id);
  if (it == ids_.end()) return;
  eng_->free_sequence(it->second);
  ids_.erase(it);
}

Status RuntimeEngine::batch(std::span<const StepItem> items, std::vector<runtime::BatchItem>& b) const {
  b.reserve(items.size());
  std::lock_guard lk(mu_);
  for (const auto& it : items) {
    auto f = ids_.find(it.seq);
    if (f == ids_.end()) return err("serve engine: forward on unknown sequence {}", it.seq);
    const auto mode = !it.want_logits ? runtime::LogitsMode::kNone
                      : it.all_logits ? runtime::LogitsMode::kAll
                                      : runtime::LogitsMode::kLast;
    b.push_back(runtime::BatchItem{f->second, it.tokens, mode});
  }
  return {};
}

Status RuntimeEngine::forward(std::span<const StepItem> items, std::vector<float>& logits) {
  std::vector<runtime::BatchItem> b;
  GRIDQ_RETURN_IF_ERROR(batch(items, b));
  GRIDQ_ASSIGN_OR_RETURN(auto out, eng_->forward(b));
  logits.insert(logits.end(), out.begin(), out.end());
  return {};
}

Status RuntimeEngine::forward_sampled(std::span<const StepItem> items,
                                      std::span<const runtime::SamplePlan* const> plans,
                                      std::vector<runtime::SampledToken>& out) {
  std::vector<runtime::BatchItem> b;
  GRIDQ_RETURN_IF_ERROR(batch(items, b));
  GRIDQ_ASSIGN_OR_RETURN(auto toks, eng_->forward_sampled(b, plans));
  out.insert(out.end(), toks.begin(), toks.end());
  return {};
}

bool RuntimeEngine::samples_on_host() const { return !eng_->backend().samples_on_device(); }

std::vector<WeightFormatUse> RuntimeEngine::weight_formats() const {
  const runtime::ModelWeights* m = eng_->backend().weight_metadata();
  return m ? weight_format_uses(*m) : std::vector<WeightFormatUse>{};
}

std::vector<std::string> RuntimeEngine::describe_kernels() const {
  const bool cuda = eng_->device() == runtime::DeviceKind::kCuda;
  std::vector<std::string> lines;
  for (const auto& u : weight_formats()) lines.push_back(kernel_line(u, cuda));
  for (const auto& k : eng_->backend().kernel_report()) lines.push_back(k);
  if (lines.empty()) lines.push_back("this backend gives no per-format kernel report");
  return lines;
}

}  // namespace gridq::serve
