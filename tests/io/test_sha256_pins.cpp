// SHA-256 against the FIPS 180-2 test vectors, and PINS.json write/verify with every kind of mismatch.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "io/pins.h"
#include "io/sha256.h"

namespace gridq::io {
namespace {

using testing::read_file;
using testing::TempDir;
using testing::write_file;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(bytes_of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes_of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(bytes_of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileStreamsInChunks) {
  TempDir d;
  write_file(d / "abc", "abc");
  auto h = sha256_file(d / "abc");
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(*h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 1,000,000 'a' split over a chunk boundary when repeated: 3 MB crosses the 1 MiB chunk size.
  write_file(d / "a1m", std::string(1000000, 'a'));
  h = sha256_file(d / "a1m");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::string big(3 * 1000000 + 17, 'q');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>(i);
  write_file(d / "big", big);
  h = sha256_file(d / "big");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*h, sha256_hex(bytes_of(big)));
  h = sha256_file(d / "missing");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.message().find("missing: cannot open"), std::string::npos) << h.message();
}

void make_artifact(const TempDir& d) {
  write_file(d / "config.json", "{}\n");
  write_file(d / "model.safetensors", std::string(100, 'x'));
  write_file(d / "sub/deeper/notes.txt", "abc");
  write_file(d / ".hidden", "");
}

void expect_error(const Status& st, const std::vector<std::string>& substrs) {
  ASSERT_FALSE(st.ok());
  for (const auto& s : substrs)
    EXPECT_NE(st.message().find(s), std::string::npos) << st.message() << "\nwant: " << s;
}

TEST(Pins, RoundTripAndFormat) {
  TempDir d;
  make_artifact(d);
  ASSERT_TRUE(write_pins(d.path()).ok());
  auto st = verify_pins(d.path());
  EXPECT_TRUE(st.ok()) << st.message();

  const std::string text = read_file(d / "PINS.json");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.rfind("{\n  \"files\": {\n    \".hidden\": {\n", 0), 0u) << text;
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["version"], 1);
  ASSERT_EQ(j["files"].size(), 4u);
  EXPECT_EQ(j["files"]["sub/deeper/notes.txt"]["sha256"],
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(j["files"]["sub/deeper/notes.txt"]["size"], 3);
  EXPECT_EQ(j["files"][".hidden"]["sha256"],
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(j["files"]["model.safetensors"]["size"], 100);
  EXPECT_FALSE(j["files"].contains("PINS.json"));
  EXPECT_FALSE(std::filesystem::exists(d / "PINS.json.tmp"));

  // Deterministic: writing again gives the same bytes.
  ASSERT_TRUE(write_pins(d.path()).ok());
  EXPECT_EQ(read_file(d / "PINS.json"), text);
}

TEST(Pins, TamperOneByteNamesTheFile) {
  TempDir d;
  make_artifact(d);
  ASSERT_TRUE(write_pins(d.path()).ok());
  std::string m = read_file(d / "model.safetensors");
  m[50] = 'y';
  write_file(d / "model.safetensors", m);
  expect_error(verify_pins(d.path()), {"1 problem", "modified file model.safetensors: sha256"});
}

TEST(Pins, SizeChangeMissingAndExtraAllReported) {
  TempDir d;
  make_artifact(d);
  ASSERT_TRUE(write_pins(d.path()).ok());
  write_file(d / "config.json", "{}");  // one byte shorter
  std::filesystem::remove(d / "sub/deeper/notes.txt");
  write_file(d / "sub/extra.bin", "e");
  expect_error(verify_pins(d.path()), {"3 problems", "modified file config.json: size 2 but pinned 3",
                                       "missing file sub/deeper/notes.txt", "extra file sub/extra.bin"});
}

TEST(Pins, MissingOrMalformedPinsFile) {
  TempDir d;
  make_artifact(d);
  expect_error(verify_pins(d.path()), {"missing PINS.json"});
  write_file(d / "PINS.json", "{\"version\": 2, \"files\": {}}");
  expect_error(verify_pins(d.path()), {"unsupported version 2"});
  write_file(d / "PINS.json",
             "{\"version\": 1, \"files\": {\"config.json\": {\"sha256\": \"ABC\", \"size\": 3}}}");
  expect_error(verify_pins(d.path()), {"entry for 'config.json'"});
  write_file(d / "PINS.json", "{\"version\": 1, \"files\": {}, \"files\": {}}");
  expect_error(verify_pins(d.path()), {"duplicate key 'files'"});
  write_file(d / "PINS.json", "{\"version\": 1, \"files\": {}}");
  expect_error(verify_pins(d.path()), {"4 problems", "extra file .hidden", "extra file config.json"});
}

TEST(Pins, RefusesSymlinks) {
  TempDir d;
  make_artifact(d);
  std::filesystem::create_symlink(d / "config.json", d / "link.json");
  expect_error(write_pins(d.path()), {"link.json is a symlink"});
  std::filesystem::remove(d / "link.json");
  ASSERT_TRUE(write_pins(d.path()).ok());
  std::filesystem::create_directory_symlink(d / "sub", d / "sublink");
  expect_error(verify_pins(d.path()), {"sublink is a symlink"});
  expect_error(write_pins(d / "nope"), {"not a directory"});
}

}  // namespace
}  // namespace gridq::io
