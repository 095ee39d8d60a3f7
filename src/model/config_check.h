// Range checks of config.json before any adapter reads it, and of the ModelSpec an adapter produced
// (issue 14 item 4). Every numeric field gridq reads is checked for type and range with a message naming the
// key, so no value can truncate to 32 bits, divide by zero or load a model that can only produce NaN.
// model::adapt runs both; `gridq inspect` runs the loader, so it refuses exactly what the loader refuses.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/model_spec.h"

namespace gridq::model {

// config.json as given: integers in range (no silent narrowing), numbers finite and in range.
Status check_config_values(const nlohmann::json& config);

// The adapted spec: the invariants the runtime divides and indexes by.
Status check_spec(const ModelSpec& spec);

}  // namespace gridq::model
