#include "quant/book_keys.h"

#include <fmt/format.h>

#include <string_view>

#include "core/numerics.h"

namespace gridq::quant {

std::string book_key(const std::string& format, int layer) { return fmt::format("{}@{}", format, layer); }

int layer_of_name(const std::string& name) {
  // The first "layers.<digits>." that starts the name or follows a dot (up to 6 digits).
  static constexpr std::string_view kKey = "layers.";
  for (size_t at = name.find(kKey); at != std::string::npos; at = name.find(kKey, at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    const size_t i = at + kKey.size();
    size_t end = i;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == i || end >= name.size() || name[end] != '.' || end - i > 6) continue;
    return std::stoi(name.substr(i, end - i));
  }
  return -1;
}

std::string book_key_for(const std::string& source, const std::string& format, int layer) {
  return source == kPerLayerBooks ? book_key(format, layer) : format;
}

std::string book_key_for(const std::string& source, const std::string& format, const std::string& name) {
  return book_key_for(source, format, layer_of_name(name));
}

std::string book_format(const std::string& key) { return key.substr(0, key.find('@')); }

std::string book_ref(const std::string& source, int layer) {
  if (source == "lattice") return "lattice";
  return source == kPerLayerBooks ? fmt::format("learned.L{}", layer) : "learned";
}

std::vector<gridbook::CodebookTable> codebook_tables(const gridbook::Codebook& cb, const std::string& ref) {
  std::vector<gridbook::CodebookTable> out;
  for (int i = 0; i < cb.rung.n_sub(); ++i) {
    gridbook::CodebookTable t;
    t.name = gridbook::codebook_table_name(ref, cb.rung, i);
    t.cols = cb.rung.sub_dim();
    t.rows = static_cast<int64_t>(cb.sub[static_cast<size_t>(i)].size()) / t.cols;
    for (float v : cb.sub[static_cast<size_t>(i)]) t.f16.push_back(f32_to_f16(v));
    t.sha256 = gridbook::codebook_digest(t.f16);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace gridq::quant
