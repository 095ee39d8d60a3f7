#include "quant/rotate_options.h"

#include <filesystem>

#include "quant/rotate.h"

namespace gridq::quant {

namespace fs = std::filesystem;
using nlohmann::json;

Expected<QuantizeOptions> rotated_options(const QuantizeOptions& o, json& record) {
  if (o.rotate != "hadamard") return err("--rotate '{}': expected hadamard", o.rotate);
  if (o.out.empty() || o.src.empty()) return err("quantize: SRC and OUT are required");
  std::error_code ec;
  if (fs::exists(o.out, ec) && !o.overwrite)
    return err("{}: already exists; refusing to replace it (pass --overwrite)", o.out);
  QuantizeOptions r = o;
  r.src = o.out + ".rotated-src";
  fs::remove_all(r.src, ec);
  if (ec) return err("{}: cannot remove: {}", r.src, ec.message());
  RotateOptions ro;
  ro.seed = o.rotate_seed;
  ro.threads = o.threads;
  auto s = rotate_checkpoint(o.src, r.src, ro);
  if (!s.ok()) return err("--rotate: {}", s.message());
  record = {{"kind", o.rotate},
            {"seed", o.rotate_seed},
            {"construction", s->construction},
            {"source", o.src},
            {"input_side_matrices", s->input_side},
            {"output_side_matrices", s->output_side},
            {"norms_set_to_one", s->norms}};
  return r;
}

}  // namespace gridq::quant
