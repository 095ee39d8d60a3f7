#include "serve/kv_setup.h"

#include <fmt/format.h>

#include <algorithm>

namespace gridq::serve {

Expected<std::unique_ptr<RuntimeEngine>> make_serve_engine(
    std::unique_ptr<runtime::Engine> eng, int64_t max_len, bool prefix_caching, bool explicit_flag,
    Metrics& metrics, const std::function<void(const std::string&)>& log) {
  const std::string mem = eng->backend().memory_report();
  if (!mem.empty()) log("memory: " + mem);
  // Prefix caching needs the backend's primitives (runtime/backend.h); without them it stays off, said so.
  bool prefix = prefix_caching;
  if (prefix && !eng->backend().supports_prefix_caching()) {
    const std::string why = fmt::format(
        "prefix caching: not supported by the {} backend (it cannot yet run positions without writing their "
        "full-layer KV, which rebuilding the sliding-window rings over shared pages needs)",
        eng->device() == runtime::DeviceKind::kCuda ? "cuda" : "this");
    if (explicit_flag) return err("--enable-prefix-caching: {}", why);
    log(why + "; serving without it");
    prefix = false;
  }
  const runtime::KvPageStats kv = eng->backend().kv_pages();
  GRIDQ_ASSIGN_OR_RETURN(auto r, RuntimeEngine::create(std::move(eng), max_len, prefix));
  if (kv.total >= 0) {
    log(fmt::format("kv cache: {} pages of {} tokens ({} tokens), prefix caching {}", kv.total,
                    kv.page_tokens, kv.total * kv.page_tokens, prefix ? "on" : "off"));
    if (kv.total * kv.page_tokens < max_len)
      log(fmt::format(
          "WARNING: max_model_len {} exceeds the KV cache ({} tokens): a request that cannot fit gets a 400",
          max_len, kv.total * kv.page_tokens));
  }
  metrics.set_cache_config(kv.page_tokens, std::max<int64_t>(kv.total, 0), prefix);
  return r;
}

}  // namespace gridq::serve
