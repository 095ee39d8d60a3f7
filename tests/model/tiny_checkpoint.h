// The bundled laguna-tiny-code checkpoint opened as the adapters see it (config + tensor table), for the
// model tests that edit its config.json in memory.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "io/checkpoint.h"
#include "model/loader.h"

namespace gridq::model::testing {

struct Tiny {
  std::unique_ptr<io::Checkpoint> ckpt;
  nlohmann::json config;
  TensorTable table;
};

inline Tiny open_tiny() {
  Tiny t;
  auto c = io::Checkpoint::open(std::string(GRIDQ_SOURCE_DIR) + "/models/laguna-tiny-code");
  EXPECT_TRUE(c.ok()) << c.message();
  if (!c.ok()) return t;
  t.ckpt = std::move(*c);
  t.config = t.ckpt->config();
  t.table = tensor_table(*t.ckpt);
  return t;
}

}  // namespace gridq::model::testing
