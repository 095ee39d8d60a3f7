// Pieces of the quantization config's parser shared by quant_config.cpp and quant_config_scheme.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"
#include "gridbook/quant_config.h"

namespace gridq::gridbook::quant_config_detail {

// obj[key] as an integer in [-1e6, 1e6] / as a string; errors name `where` and the key.
Expected<int> get_int_key(const nlohmann::json& obj, const char* key, std::string_view where);
Expected<std::string> get_str_key(const nlohmann::json& obj, const char* key, std::string_view where);

// A gridbook scheme object of a config group whose format is `format` (every key checked, format.md §11).
Expected<CbScheme> parse_scheme(const nlohmann::json& s, const std::string& format, std::string_view where);
nlohmann::json scheme_to_json(const CbScheme& s);

}  // namespace gridq::gridbook::quant_config_detail
