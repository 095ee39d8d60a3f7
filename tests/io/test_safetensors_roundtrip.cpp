// Writer -> reader round trips on random tensors of every dtype, plus the writer's refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "io_test_util.h"
#include "io/safetensors.h"

namespace gridq::io {
namespace {

constexpr DType kAll[] = {DType::BOOL, DType::U8,   DType::I8,  DType::U16,     DType::I16,
                          DType::F16,  DType::BF16, DType::U32, DType::I32,     DType::F32,
                          DType::U64,  DType::I64,  DType::F64, DType::F8_E4M3, DType::F8_E5M2};

TEST(SafetensorsDType, NamesAndSizesMatchTheSpec) {
  // Sizes from the safetensors spec table (independent of our table).
  const std::pair<const char*, size_t> spec[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2}, {"F16", 2},     {"BF16", 2},   {"U32", 4},
      {"I32", 4},  {"F32", 4}, {"U64", 8}, {"I64", 8}, {"F64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  ASSERT_EQ(std::size(spec), std::size(kAll));
  for (size_t i = 0; i < std::size(kAll); ++i) {
    EXPECT_EQ(dtype_name(kAll[i]), spec[i].first);
    EXPECT_EQ(dtype_size(kAll[i]), spec[i].second);
    auto d = dtype_from_name(spec[i].first);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, kAll[i]);
  }
  EXPECT_FALSE(dtype_from_name("F8_E8M0").ok());
  EXPECT_FALSE(dtype_from_name("").ok());
}

TEST(SafetensorsRoundTrip, RandomTensorsEveryDType) {
  testing::TempDir dir;
  std::mt19937_64 rng(1234);
  std::vector<SafetensorsWriter::Decl> decls;
  std::vector<std::vector<uint8_t>> payloads;
  for (int rep = 0; rep < 3; ++rep) {
    for (DType d : kAll) {
      std::vector<int64_t> shape;
      const int rank = static_cast<int>(rng() % 4);  // 0..3, rank 0 = scalar
      for (int r = 0; r < rank; ++r) shape.push_back(static_cast<int64_t>(rng() % 7));  // may be 0
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(d));
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      decls.push_back({std::string(dtype_name(d)) + ".t" + std::to_string(rep), d, shape});
      payloads.push_back(std::move(bytes));
    }
  }
  const std::string path = dir / "rt.safetensors";
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode ✓"}};
  auto w = SafetensorsWriter::create(path, decls, meta);
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_FALSE(std::filesystem::exists(path));  // only the .tmp exists until finish()
  for (size_t i = 0; i < payloads.size(); ++i) {
    // Write in uneven chunks to exercise partial writes.
    std::span<const uint8_t> p = payloads[i];
    size_t cut = p.empty() ? 0 : rng() % p.size();
    ASSERT_TRUE((*w)->write(p.subspan(0, cut)).ok());
    ASSERT_TRUE((*w)->write(p.subspan(cut)).ok());
  }
  auto st = (*w)->finish();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  const std::string raw = testing::read_file(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, raw.data(), 8);
  EXPECT_EQ(hlen % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(raw[8], '{');

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ((*f)->metadata(), meta);
  ASSERT_EQ((*f)->tensors().size(), decls.size());
  for (size_t i = 0; i < decls.size(); ++i) {
    const TensorInfo* t = (*f)->find(decls[i].name);
    ASSERT_NE(t, nullptr) << decls[i].name;
    EXPECT_EQ(t->dtype, decls[i].dtype);
    EXPECT_EQ(t->shape, decls[i].shape);
    ASSERT_EQ(t->nbytes(), payloads[i].size());
    EXPECT_TRUE(std::equal(payloads[i].begin(), payloads[i].end(), t->bytes().begin())) << decls[i].name;
  }

  // Determinism: the same declarations and bytes give the same file.
  const std::string path2 = dir / "rt2.safetensors";
  auto w2 = SafetensorsWriter::create(path2, decls, meta);
  ASSERT_TRUE(w2.ok());
  for (const auto& p : payloads) ASSERT_TRUE((*w2)->write(p).ok());
  ASSERT_TRUE((*w2)->finish().ok());
  EXPECT_EQ(testing::read_file(path2), raw);
}

TEST(SafetensorsWriter, WritesSpanningTensorsAreAStream) {
  testing::TempDir dir;
  auto w = SafetensorsWriter::create(dir / "s.safetensors", {{"a", DType::U8, {3}}, {"b", DType::U16, {2}}});
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> all = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE((*w)->write(all).ok());
  ASSERT_TRUE((*w)->finish().ok());
  auto f = SafetensorsFile::open(dir / "s.safetensors");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ((*f)->find("b")->bytes()[0], 4);
}

TEST(SafetensorsWriter, RefusesShortAndLongWritesAndCleansUp) {
  testing::TempDir dir;
  const std::string p = dir / "w.safetensors";
  {
    auto w = SafetensorsWriter::create(p, {{"a", DType::F32, {2}}, {"b", DType::U8, {1}}});
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> eight(8, 0);
    ASSERT_TRUE((*w)->write(eight).ok());
    auto st = (*w)->finish();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("short write: 8 of 9"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("tensor 'b'"), std::string::npos) << st.message();
    EXPECT_TRUE(std::filesystem::exists(p + ".tmp"));
  }
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp")) << "destructor removes the unfinished tmp";
  EXPECT_FALSE(std::filesystem::exists(p));
  {
    auto w = SafetensorsWriter::create(p, {{"a", DType::U8, {2}}});
    ASSERT_TRUE(w.ok());
    std::vector<uint8_t> three(3, 0);
    auto st = (*w)->write(three);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("too many bytes"), std::string::npos) << st.message();
    EXPECT_FALSE((*w)->finish().ok()) << "a failed writer stays failed";
  }
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
  EXPECT_FALSE(std::filesystem::exists(p));
}

TEST(SafetensorsWriter, RefusesBadDeclarations) {
  testing::TempDir dir;
  const std::string p = dir / "d.safetensors";
  auto w = SafetensorsWriter::create(p, {{"a", DType::U8, {1}}, {"a", DType::U8, {1}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("tensor 'a' declared twice"), std::string::npos) << w.message();
  w = SafetensorsWriter::create(p, {{"a", DType::U8, {-1}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("negative dimension"), std::string::npos) << w.message();
  w = SafetensorsWriter::create(p, {{"__metadata__", DType::U8, {1}}});
  ASSERT_FALSE(w.ok());
  w = SafetensorsWriter::create(p, {{"", DType::U8, {1}}});
  ASSERT_FALSE(w.ok());
  w = SafetensorsWriter::create(p, {{"a", DType::F64, {INT64_C(1) << 62}}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("overflows"), std::string::npos) << w.message();
  w = SafetensorsWriter::create(dir / "no/such/dir/x.safetensors", {});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("cannot create"), std::string::npos) << w.message();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

}  // namespace
}  // namespace gridq::io
