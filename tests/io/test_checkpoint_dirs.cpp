// Checkpoint directory rules: sharded index consistency, single-file layout, and the refusals.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/checkpoint.h"
#include "io_test_util.h"

namespace gridq::io {
namespace {

using testing::TempDir;
using testing::write_file;

// Writes a shard holding U8 tensors of one byte each.
void shard(const std::string& path, const std::vector<std::string>& names) {
  std::vector<SafetensorsWriter::Decl> decls;
  for (const auto& n : names) decls.push_back({n, DType::U8, {1}});
  auto w = SafetensorsWriter::create(path, decls);
  ASSERT_TRUE(w.ok()) << w.message();
  for (size_t i = 0; i < names.size(); ++i) {
    uint8_t b = static_cast<uint8_t>(i + 1);
    ASSERT_TRUE((*w)->write({&b, 1}).ok());
  }
  ASSERT_TRUE((*w)->finish().ok());
}

void index(const std::string& dir, const std::string& weight_map_json) {
  write_file(dir + "/model.safetensors.index.json",
             "{\"metadata\": {\"total_size\": 3}, \"weight_map\": " + weight_map_json + "}");
}

// A valid two-shard checkpoint: a, b in shard 1; c in shard 2.
void good_sharded(const TempDir& d) {
  write_file(d / "config.json", "{\"model_type\": \"toy\"}");
  shard(d / "model-00001-of-00002.safetensors", {"a", "b"});
  shard(d / "model-00002-of-00002.safetensors", {"c"});
  index(d.path(),
        R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors"})");
}

void expect_refused(const std::string& dir, const std::string& substr) {
  auto ck = Checkpoint::open(dir);
  ASSERT_FALSE(ck.ok()) << "accepted; wanted: " << substr;
  EXPECT_NE(ck.message().find(substr), std::string::npos) << "got: " << ck.message() << "\nwant: " << substr;
}

TEST(CheckpointDir, ShardedOpens) {
  TempDir d;
  good_sharded(d);
  auto ck = Checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.message();
  EXPECT_EQ((*ck)->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*ck)->files().size(), 2u);
  EXPECT_EQ((*ck)->total_tensor_bytes(), 3u);
  EXPECT_EQ((*ck)->find("c")->bytes()[0], 1);
  EXPECT_EQ((*ck)->find("b")->bytes()[0], 2);
  EXPECT_EQ((*ck)->config()["model_type"], "toy");
}

TEST(CheckpointDir, SingleFileOpens) {
  TempDir d;
  write_file(d / "config.json", "{}");
  shard(d / "model.safetensors", {"x", "y"});
  auto ck = Checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.message();
  EXPECT_EQ((*ck)->names().size(), 2u);
}

TEST(CheckpointDir, MissingShard) {
  TempDir d;
  good_sharded(d);
  std::filesystem::remove(d / "model-00002-of-00002.safetensors");
  expect_refused(d.path(),
                 "shard model-00002-of-00002.safetensors named by model.safetensors.index.json does "
                 "not exist");
}

TEST(CheckpointDir, TensorInTwoShards) {
  TempDir d;
  good_sharded(d);
  shard(d / "model-00002-of-00002.safetensors", {"c", "a"});
  expect_refused(d.path(),
                 "tensor 'a' is in two shards: model-00001-of-00002.safetensors and "
                 "model-00002-of-00002.safetensors");
}

TEST(CheckpointDir, IndexNamesTensorAbsentFromShard) {
  TempDir d;
  good_sharded(d);
  index(d.path(),
        R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors", "ghost": "model-00002-of-00002.safetensors"})");
  expect_refused(d.path(),
                 "tensor 'ghost' is listed in model.safetensors.index.json for shard "
                 "model-00002-of-00002.safetensors but that shard lacks it");
}

TEST(CheckpointDir, IndexNamesWrongShard) {
  TempDir d;
  good_sharded(d);
  index(d.path(),
        R"({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors"})");
  expect_refused(d.path(),
                 "tensor 'b' is in shard model-00001-of-00002.safetensors but "
                 "model.safetensors.index.json names shard model-00002-of-00002.safetensors");
}

TEST(CheckpointDir, UnlistedTensor) {
  TempDir d;
  good_sharded(d);
  index(d.path(), R"({"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})");
  expect_refused(d.path(),
                 "tensor 'b' in shard model-00001-of-00002.safetensors is not listed in "
                 "model.safetensors.index.json");
}

TEST(CheckpointDir, StaleShardNotInIndex) {
  TempDir d;
  good_sharded(d);
  shard(d / "model-00003-of-00003.safetensors", {"z"});
  expect_refused(d.path(), "model-00003-of-00003.safetensors is not named by model.safetensors.index.json");
}

TEST(CheckpointDir, DuplicateKeyInIndex) {
  TempDir d;
  good_sharded(d);
  index(d.path(),
        R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"})");
  expect_refused(d.path(), "duplicate key 'c' in JSON object /weight_map");
}

TEST(CheckpointDir, ShardPathEscape) {
  TempDir d;
  good_sharded(d);
  index(d.path(), R"({"a": "../model-00001-of-00002.safetensors"})");
  expect_refused(d.path(),
                 "tensor 'a': shard '../model-00001-of-00002.safetensors' is not a plain file name");
}

TEST(CheckpointDir, IndexWithoutWeightMap) {
  TempDir d;
  good_sharded(d);
  write_file(d / "model.safetensors.index.json", "{\"metadata\": {}}");
  expect_refused(d.path(), "missing \"weight_map\" object");
}

TEST(CheckpointDir, SeveralFilesWithoutIndex) {
  TempDir d;
  good_sharded(d);
  std::filesystem::remove(d / "model.safetensors.index.json");
  expect_refused(d.path(),
                 "safetensors files [model-00001-of-00002.safetensors, "
                 "model-00002-of-00002.safetensors] without model.safetensors.index.json");
}

TEST(CheckpointDir, NoWeights) {
  TempDir d;
  write_file(d / "config.json", "{}");
  expect_refused(d.path(), "no model.safetensors and no model.safetensors.index.json");
}

TEST(CheckpointDir, MissingDirAndConfig) {
  TempDir d;
  expect_refused(d / "nope", "not a directory");
  shard(d / "model.safetensors", {"x"});
  expect_refused(d.path(), "missing config.json");
}

TEST(CheckpointDir, MalformedConfig) {
  TempDir d;
  shard(d / "model.safetensors", {"x"});
  write_file(d / "config.json", "{\"a\": 1,}");
  expect_refused(d.path(), d / "config.json" + ": invalid JSON");
  write_file(d / "config.json", "{\"a\": 1, \"a\": 2}");
  expect_refused(d.path(), "duplicate key 'a'");
  write_file(d / "config.json", "[1]");
  expect_refused(d.path(), "config.json: not a JSON object");
  write_file(d / "config.json", std::string("{}\0{", 4));
  expect_refused(d.path(), "NUL byte at byte 2");
}

TEST(CheckpointDir, CorruptShardNamesTheShard) {
  TempDir d;
  good_sharded(d);
  write_file(d / "model-00002-of-00002.safetensors", "0123");
  expect_refused(d.path(), "model-00002-of-00002.safetensors: file is 4 bytes, shorter than the 8-byte");
}

TEST(ReadJsonFile, Errors) {
  TempDir d;
  auto j = read_json_file(d / "absent.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.message().find("absent.json: cannot open"), std::string::npos) << j.message();
  write_file(d / "bad.json", "{\"\xff\": 1}");
  j = read_json_file(d / "bad.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.message().find("not valid UTF-8"), std::string::npos) << j.message();
  write_file(d / "ok.json", "{\"k\": [1, 2, {\"x\": \"y\"}]}\n");
  j = read_json_file(d / "ok.json");
  ASSERT_TRUE(j.ok()) << j.message();
  EXPECT_EQ((*j)["k"][2]["x"], "y");
}

}  // namespace
}  // namespace gridq::io
