#include "quant/book_keys.h"

#include <fmt/format.h>

namespace gridq::quant {

std::string book_key(const std::string& format, int layer) { return fmt::format("{}@{}", format, layer); }

int layer_of_name(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  const size_t at = name.find(kPrefix);
  if (at == std::string::npos) return -1;
  const size_t i = at + kPrefix.size();
  size_t end = i;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == i || end >= name.size() || name[end] != '.' || end - i > 6) return -1;
  return std::stoi(name.substr(i, end - i));
}

std::string book_key_for(const std::string& source, const std::string& format, const std::string& name) {
  return source == kPerLayerBooks ? book_key(format, layer_of_name(name)) : format;
}

}  // namespace gridq::quant
