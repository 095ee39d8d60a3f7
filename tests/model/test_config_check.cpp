// config.json values are range-checked at load with a message naming the key (issue 14 item 4): values that
// used to divide by zero (num_key_value_heads 0, or 2^33 truncated to 0), wrap to 32 bits (a vocab of 10^12)
// or load a model that can only produce NaN (rms_norm_eps or rope_theta <= 0) are refused by adapt(), which
// every loader (generate, chat, serve, inspect) goes through.
#include <gtest/gtest.h>

#include <limits>

#include "io/checkpoint.h"
#include "model/config_check.h"
#include "model/loader.h"
#include "tiny_checkpoint.h"

namespace gridq::model {
namespace {

using testing::open_tiny;

TEST(ConfigCheck, RefusesOutOfRangeValuesNamingTheKey) {
  auto t = open_tiny();
  ASSERT_TRUE(adapt(t.config, t.table).ok());
  struct Case {
    const char* pointer;  // JSON pointer into config.json
    const char* value;    // JSON literal
    const char* key;      // what the message must name
  };
  const Case cases[] = {
      {"/num_key_value_heads", "0", "num_key_value_heads"},
      {"/num_key_value_heads", "8589934592", "num_key_value_heads"},  // 2^33: was truncated to 0 -> SIGFPE
      {"/num_key_value_heads", "-2", "num_key_value_heads"},
      {"/num_attention_heads", "0", "num_attention_heads"},
      {"/num_attention_heads_per_layer/1", "0", "num_attention_heads_per_layer[1]"},
      {"/vocab_size", "1000000000000", "vocab_size"},  // was reported as -727379968
      {"/vocab_size", "18446744073709551615", "vocab_size"},
      {"/hidden_size", "4294967808", "hidden_size"},  // 2^32 + 512: narrows to 512
      {"/num_hidden_layers", "2.5", "num_hidden_layers"},
      {"/head_dim", "\"128\"", "head_dim"},
      {"/rms_norm_eps", "-1", "rms_norm_eps"},
      {"/rms_norm_eps", "0", "rms_norm_eps"},
      {"/rms_norm_eps", "1e-60", "rms_norm_eps"},  // positive, but 0 in fp32
      {"/rope_parameters/full_attention/rope_theta", "-1", "rope_theta"},
      {"/rope_parameters/sliding_attention/rope_theta", "0", "rope_theta"},
      {"/rope_parameters/full_attention/factor", "inf", "factor"},
      {"/max_position_embeddings", "0", "max_position_embeddings"},
      {"/max_position_embeddings", "4611686018427387904", "max_position_embeddings"},  // 2^62
      {"/sliding_window", "-64", "sliding_window"},
      {"/num_experts_per_tok", "4294967300", "num_experts_per_tok"},
      {"/moe_routed_scaling_factor", "0", "moe_routed_scaling_factor"},
      {"/eos_token_id", "4096", "eos_token_id"},
      {"/bos_token_id", "99999999999", "bos_token_id"},
      {"/initializer_range", "inf", "initializer_range"},  // any non-finite number, read or not
  };
  for (const auto& c : cases) {
    nlohmann::json cfg = t.config;
    // JSON text cannot spell infinity (the parser refuses 1e999); a config built in memory can.
    cfg[nlohmann::json::json_pointer(c.pointer)] =
        std::string(c.value) == "inf" ? nlohmann::json(std::numeric_limits<double>::infinity())
                                      : nlohmann::json::parse(c.value);
    auto a = adapt(cfg, t.table);
    ASSERT_FALSE(a.ok()) << c.pointer << " = " << c.value;
    EXPECT_NE(a.message().find(c.key), std::string::npos) << c.pointer << ": " << a.message();
    EXPECT_NE(a.message().find("config.json"), std::string::npos) << a.message();
  }
}

TEST(ConfigCheck, AcceptsNullAndAbsentOptionalFields) {
  auto t = open_tiny();
  nlohmann::json cfg = t.config;
  cfg["pad_token_id"] = nullptr;
  cfg.erase("max_position_embeddings");
  EXPECT_TRUE(adapt(cfg, t.table).ok());
  EXPECT_TRUE(check_config_values(nlohmann::json::parse(R"({"rope_scaling":null,"head_dim":null})")).ok());
}

}  // namespace
}  // namespace gridq::model
