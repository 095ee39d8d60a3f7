// Which codebook a CB tensor uses. `--codebooks lattice` and `learned` keep one book per rung, under the
// rung's name; `learned-per-layer` keeps one per (rung, layer), the routed stack's gate/up and down sharing
// it (format.md §11: one codebook_ref per stack), under book_key. The artifact then has one config group per
// (rung, layer), "nvfp4_cb_k16_l3", whose tables are "cb_codebook.learned.L3.<rung>.sub<i>".
#pragma once

#include <string>
#include <vector>

#include "gridbook/codec.h"
#include "gridbook/sidecar.h"

namespace gridq::quant {

inline constexpr const char* kPerLayerBooks = "learned-per-layer";

std::string book_key(const std::string& format, int layer);  // "NVFP4_CB_K16@3"
// The decoder layer of a tensor or module name ("model.layers.3.…", "layers.3.…" → 3), or −1.
int layer_of_name(const std::string& name);

// The book key of `format` for decoder layer `layer` (or tensor or module `name`) under codebook source
// `source`: book_key(format, layer) for learned-per-layer books, else the format itself.
std::string book_key_for(const std::string& source, const std::string& format, int layer);
std::string book_key_for(const std::string& source, const std::string& format, const std::string& name);
// The format of a book key ("NVFP4_CB_K16@3" → "NVFP4_CB_K16").
std::string book_format(const std::string& key);

// The sidecar ref of a book (codebook_table_name's `ref`; format.md §10: producer-chosen and opaque):
// "lattice", "learned", or "learned.L3" for layer 3's book under learned-per-layer.
std::string book_ref(const std::string& source, int layer);

// A book's sub-tables as sidecar tables named after `ref` (FP16 values, digests).
std::vector<gridbook::CodebookTable> codebook_tables(const gridbook::Codebook& cb, const std::string& ref);

}  // namespace gridq::quant
