// `gridq serve`'s KV set-up: prefix caching as asked and as the backend supports it, the start-up lines
// naming the page pool, and gridq:cache_config_info.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "runtime/engine.h"
#include "serve/metrics.h"
#include "serve/runtime_engine.h"

namespace gridq::serve {

// `prefix_caching` on (the default) with a backend that has no prefix cache logs why and serves without it;
// `explicit_flag` (--enable-prefix-caching given) makes that an error instead.
Expected<std::unique_ptr<RuntimeEngine>> make_serve_engine(
    std::unique_ptr<runtime::Engine> eng, int64_t max_len, bool prefix_caching, bool explicit_flag,
    Metrics& metrics, const std::function<void(const std::string&)>& log);

}  // namespace gridq::serve
