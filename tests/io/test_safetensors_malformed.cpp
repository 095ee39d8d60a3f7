// Corruption matrix for the safetensors reader: each malformed container is built byte by byte here and
// must be refused with a message naming the buffer, the tensor (where there is one) and the rule.
#include <gtest/gtest.h>

#include <string>

#include "io_test_util.h"
#include "io/safetensors.h"

namespace gridq::io {
namespace {

using testing::raw_safetensors;

struct Case {
  const char* what;
  std::vector<uint8_t> bytes;
  std::string expect;  // substring of the error
};

std::string ok_entry(const char* dtype, const char* shape, const char* offs) {
  return std::string("{\"dtype\":\"") + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offs + "}";
}

std::vector<Case> cases() {
  const std::string a4 = "\"a\":" + ok_entry("F32", "[1]", "[0,4]");
  std::vector<Case> c;
  c.push_back({"shorter than 8 bytes", {1, 2, 3}, "shorter than the 8-byte header length"});
  c.push_back(
      {"header length over limit", raw_safetensors("{}", 0, (100ull << 20) + 1), "exceeds the 104857600"});
  c.push_back({"header length past end", raw_safetensors("{}", 0, 3), "runs past the end of the file"});
  c.push_back({"header length huge", raw_safetensors("{}", 0, UINT64_MAX - 1), "exceeds the 104857600"});
  c.push_back({"invalid JSON", raw_safetensors("{\"a\":", 0), "invalid JSON"});
  c.push_back({"JSON array", raw_safetensors("[1,2]", 0), "does not begin with '{'"});
  c.push_back({"leading whitespace", raw_safetensors(" {}", 0), "does not begin with '{'"});
  c.push_back({"empty header", raw_safetensors("", 0), "does not begin with '{'"});
  c.push_back({"trailing newline", raw_safetensors("{}\n", 0), "trailing bytes other than space padding"});
  c.push_back({"trailing garbage", raw_safetensors("{} x", 0), "invalid JSON"});
  c.push_back({"NUL after object", raw_safetensors(std::string("{}\0", 3), 0), "NUL byte at byte 2"});
  c.push_back({"NUL hides a tail", raw_safetensors(std::string("{}\0 }", 5), 0), "NUL byte at byte 2"});
  c.push_back({"NUL in a name", raw_safetensors(std::string("{\"a\0\":1}", 8), 0), "NUL byte at byte 3"});
  c.push_back({"tab padding", raw_safetensors("{}\t", 0), "trailing bytes other than space padding"});
  c.push_back(
      {"entry not an object", raw_safetensors("{\"a\":5}", 0), "tensor 'a': entry is not a JSON object"});
  c.push_back({"missing data_offsets", raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4),
               "tensor 'a': missing key 'data_offsets'"});
  c.push_back({"missing dtype", raw_safetensors("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
               "tensor 'a': missing key 'dtype'"});
  c.push_back({"extra key",
               raw_safetensors("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4),
               "tensor 'a': unexpected key 'x'"});
  c.push_back({"unknown dtype", raw_safetensors("{\"a\":" + ok_entry("F128", "[1]", "[0,4]") + "}", 4),
               "tensor 'a': unknown dtype 'F128'"});
  c.push_back({"lowercase dtype", raw_safetensors("{\"a\":" + ok_entry("f32", "[1]", "[0,4]") + "}", 4),
               "tensor 'a': unknown dtype 'f32'"});
  c.push_back({"dtype not string",
               raw_safetensors("{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
               "tensor 'a': dtype is not a string"});
  c.push_back({"negative dim", raw_safetensors("{\"a\":" + ok_entry("F32", "[-1]", "[0,4]") + "}", 4),
               "tensor 'a': shape is not a list of non-negative integers"});
  c.push_back({"float dim", raw_safetensors("{\"a\":" + ok_entry("F32", "[1.0]", "[0,4]") + "}", 4),
               "tensor 'a': shape is not a list of non-negative integers"});
  c.push_back({"shape not a list", raw_safetensors("{\"a\":" + ok_entry("F32", "\"1\"", "[0,4]") + "}", 4),
               "tensor 'a': shape is not a list of non-negative integers"});
  c.push_back({"nested shape", raw_safetensors("{\"a\":" + ok_entry("F32", "[[1]]", "[0,4]") + "}", 4),
               "JSON nesting deeper than 3"});
  c.push_back({"dim above int64",
               raw_safetensors("{\"a\":" + ok_entry("U8", "[18446744073709551615]", "[0,4]") + "}", 4),
               "tensor 'a': shape dimension 18446744073709551615 exceeds 2^63-1"});
  c.push_back({"offsets one element", raw_safetensors("{\"a\":" + ok_entry("F32", "[1]", "[4]") + "}", 4),
               "tensor 'a': data_offsets is not [begin, end]"});
  c.push_back({"offsets three elements",
               raw_safetensors("{\"a\":" + ok_entry("F32", "[1]", "[0,4,4]") + "}", 4),
               "tensor 'a': data_offsets is not [begin, end]"});
  c.push_back({"offsets negative", raw_safetensors("{\"a\":" + ok_entry("F32", "[1]", "[-4,0]") + "}", 4),
               "tensor 'a': data_offsets is not [begin, end]"});
  c.push_back({"offsets beyond u64",
               raw_safetensors("{\"a\":" + ok_entry("F32", "[1]", "[0,100000000000000000000000]") + "}", 4),
               "tensor 'a': data_offsets is not [begin, end]"});
  c.push_back({"begin > end", raw_safetensors("{\"a\":" + ok_entry("F32", "[0]", "[4,0]") + "}", 4),
               "tensor 'a': data_offsets begin 4 > end 0"});
  c.push_back({"shape x dtype != span", raw_safetensors("{\"a\":" + ok_entry("F32", "[2]", "[0,4]") + "}", 4),
               "tensor 'a': shape [2] x dtype F32 (4 bytes each) = 8 bytes, but data_offsets [0, 4] span 4"});
  c.push_back({"element count overflow",
               raw_safetensors("{\"a\":" + ok_entry("U8", "[4294967296,4294967296]", "[0,0]") + "}", 0),
               "tensor 'a': shape [4294967296, 4294967296] overflows"});
  c.push_back({"byte count overflow",
               raw_safetensors("{\"a\":" + ok_entry("F32", "[4611686018427387904]", "[0,0]") + "}", 0),
               "tensor 'a': shape [4611686018427387904] x 4 bytes overflows"});
  c.push_back({"lying dims, zero product hides nothing",
               raw_safetensors("{\"a\":" + ok_entry("F32", "[0,4611686018427387904]", "[0,4]") + "}", 4),
               "tensor 'a': shape [0, 4611686018427387904] x dtype F32"});
  c.push_back({"span beyond data", raw_safetensors("{\"a\":" + ok_entry("F32", "[2]", "[0,8]") + "}", 4),
               "tensor 'a': data_offsets [0, 8] extend beyond the data region of 4 bytes"});
  c.push_back({"overlap", raw_safetensors("{" + a4 + ",\"b\":" + ok_entry("F32", "[1]", "[2,6]") + "}", 6),
               "tensor 'b': data_offsets [2, 6] overlap tensor 'a'"});
  c.push_back({"identical spans",
               raw_safetensors("{" + a4 + ",\"b\":" + ok_entry("F32", "[1]", "[0,4]") + "}", 4),
               "overlap tensor"});
  c.push_back({"gap", raw_safetensors("{" + a4 + ",\"b\":" + ok_entry("F32", "[1]", "[8,12]") + "}", 12),
               "tensor 'b': gap of 4 unused bytes"});
  c.push_back({"gap at start", raw_safetensors("{\"a\":" + ok_entry("F32", "[1]", "[4,8]") + "}", 8),
               "tensor 'a': gap of 4 unused bytes"});
  c.push_back(
      {"trailing data bytes", raw_safetensors("{" + a4 + "}", 5), "1 trailing bytes in the data region"});
  c.push_back({"data but no tensors", raw_safetensors("{}", 3), "3 trailing bytes in the data region"});
  c.push_back({"duplicate tensor name", raw_safetensors("{" + a4 + "," + a4 + "}", 4), "duplicate key 'a'"});
  c.push_back({"duplicate key in entry",
               raw_safetensors(
                   "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
               "duplicate key 'dtype' in JSON object /a"});
  c.push_back({"duplicate metadata key", raw_safetensors("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0),
               "duplicate key 'k'"});
  c.push_back({"metadata not object", raw_safetensors("{\"__metadata__\":[]}", 0),
               "__metadata__ is not a JSON object"});
  c.push_back({"metadata value not string", raw_safetensors("{\"__metadata__\":{\"k\":1}}", 0),
               "__metadata__ value for key 'k' is not a string"});
  c.push_back({"metadata nested", raw_safetensors("{\"__metadata__\":{\"k\":{}}}", 0),
               "__metadata__ value for key 'k' is not a string"});
  c.push_back(
      {"invalid UTF-8 byte", raw_safetensors("{\"\xff\":1}", 0), "header is not valid UTF-8 (byte 2"});
  c.push_back({"overlong UTF-8", raw_safetensors("{\"\xc0\xaf\":1}", 0), "header is not valid UTF-8"});
  c.push_back({"UTF-8 surrogate", raw_safetensors("{\"\xed\xa0\x80\":1}", 0), "header is not valid UTF-8"});
  c.push_back({"truncated UTF-8", raw_safetensors("{\"\xe2\x82", 0), "header is not valid UTF-8"});
  c.push_back({"escaped lone surrogate", raw_safetensors("{\"\\ud800\":1}", 0), "invalid JSON"});
  c.push_back({"empty tensor name", raw_safetensors("{\"\":" + ok_entry("F32", "[1]", "[0,4]") + "}", 4),
               "tensor with an empty name"});
  return c;
}

TEST(SafetensorsMalformed, EveryCaseRefusedWithItsRule) {
  auto all = cases();
  ASSERT_GE(all.size(), 20u);
  for (const Case& c : all) {
    auto f = SafetensorsFile::parse(c.bytes, "mem.safetensors");
    ASSERT_FALSE(f.ok()) << c.what << ": accepted";
    EXPECT_NE(f.message().find(c.expect), std::string::npos)
        << c.what << ": got \"" << f.message() << "\", want substring \"" << c.expect << "\"";
    EXPECT_EQ(f.message().rfind("mem.safetensors", 0), 0u) << c.what << ": " << f.message();
  }
}

TEST(SafetensorsMalformed, OpenNamesTheFile) {
  testing::TempDir d;
  testing::write_file(d / "short.safetensors", "abc");
  auto f = SafetensorsFile::open(d / "short.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find(d / "short.safetensors"), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("shorter than the 8-byte"), std::string::npos) << f.message();

  auto bytes = raw_safetensors("{\"w\":" + ok_entry("F32", "[3]", "[0,4]") + "}", 4);
  testing::write_file(d / "bad.safetensors", std::string(bytes.begin(), bytes.end()));
  f = SafetensorsFile::open(d / "bad.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find(d / "bad.safetensors" + ": tensor 'w': shape [3]"), std::string::npos)
      << f.message();

  f = SafetensorsFile::open(d / "absent.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("cannot open"), std::string::npos) << f.message();
  f = SafetensorsFile::open(d.path());
  ASSERT_FALSE(f.ok());
}

TEST(SafetensorsValid, EdgeCasesAccepted) {
  // Empty header object, no data.
  auto f = SafetensorsFile::parse(raw_safetensors("{}", 0), "m");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE((*f)->tensors().empty());
  // Space padding, metadata, scalar, zero-size tensors sharing an offset, unsorted header order.
  std::string h = "{\"z\":" + ok_entry("BF16", "[0,3]", "[6,6]") +
                  ",\"s\":" + ok_entry("I16", "[]", "[4,6]") +
                  ",\"__metadata__\":{\"format\":\"pt\"},\"e\":" + ok_entry("U8", "[0]", "[0,0]") +
                  ",\"a\":" + ok_entry("U16", "[2]", "[0,4]") + "}    ";
  auto buf = raw_safetensors(h, 6);
  f = SafetensorsFile::parse(buf, "m");
  ASSERT_TRUE(f.ok()) << f.message();
  const auto& ts = (*f)->tensors();
  ASSERT_EQ(ts.size(), 4u);
  // Sorted by begin, ties broken by end: e [0,0), a [0,4), s [4,6), z [6,6).
  EXPECT_EQ(ts[0].name, "e");
  EXPECT_EQ(ts[1].name, "a");
  EXPECT_EQ(ts[2].name, "s");
  EXPECT_EQ(ts[3].name, "z");
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const TensorInfo* s = (*f)->find("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->data, buf.data() + 8 + h.size() + 4);
  EXPECT_EQ((*f)->find("z")->numel(), 0);
}

}  // namespace
}  // namespace gridq::io
