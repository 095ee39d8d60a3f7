// `gridq quantize --rotate hadamard` (issue 15 item 3): the options that quantize a rotated BF16 copy of the
// source instead of the source (quant/rotate.h), and what the provenance records about the rotation.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "quant/pipeline.h"

namespace gridq::quant {

// Writes the rotated copy of o.src to OUT.rotated-src (replacing one left by an earlier run: the copy is
// deterministic, so a resumed run sees the same bytes) and returns o with src pointing at it; `record` gets
// provenance.rotation (kind, seed, construction, source, counts). The caller removes the copy once OUT is
// written. Refuses an unknown kind, and an existing OUT without o.overwrite (before any work).
Expected<QuantizeOptions> rotated_options(const QuantizeOptions& o, nlohmann::json& record);

}  // namespace gridq::quant
