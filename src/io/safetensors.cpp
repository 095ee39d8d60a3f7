// Reader rules (each violation is refused with the file, the tensor and the rule in the message):
//  - at least 8 bytes; header length N <= 100 MiB and 8 + N <= file size
//  - header is UTF-8, begins with '{', may be padded at the end with spaces (the safetensors spec), and is
//    one JSON object with no duplicate keys anywhere
//  - "__metadata__" (optional) is an object of string -> string
//  - every other key is a non-empty tensor name whose value is an object with exactly the keys dtype, shape,
//    data_offsets; dtype is a known spelling; shape is a list of non-negative integers; data_offsets is
//    [begin, end] of unsigned integers with begin <= end
//  - product(shape) * dtype_size == end - begin, computed without overflow
//  - spans lie inside the data region, do not overlap, leave no gaps, and cover the data region exactly
#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/json_strict.h"

namespace gridq::io {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // same limit as the safetensors crate

struct DTypeRow {
  DType d;
  std::string_view name;
  size_t size;
};

constexpr DTypeRow kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4},         {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8},         {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Byte size of a tensor with this shape and dtype, or an error when the product overflows u64.
Expected<uint64_t> tensor_nbytes(const std::vector<int64_t>& shape, DType d) {
  uint64_t n = 1;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(dim), &n)) {
      return err("shape {} overflows 64-bit element count", shape_str(shape));
    }
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return err("shape {} has more than 2^63-1 elements", shape_str(shape));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<uint64_t>(dtype_size(d)), &bytes)) {
    return err("shape {} x {} bytes overflows 64-bit byte count", shape_str(shape), dtype_size(d));
  }
  return bytes;
}

// Reads a JSON number that must be a non-negative integer (not a float, not negative).
bool get_u64(const nlohmann::json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

std::string_view dtype_name(DType d) {
  for (const DTypeRow& r : kDTypes) {
    if (r.d == d) return r.name;
  }
  return "?";
}

Expected<DType> dtype_from_name(std::string_view s) {
  for (const DTypeRow& r : kDTypes) {
    if (r.name == s) return r.d;
  }
  return err("unknown dtype '{}'", s);
}

size_t dtype_size(DType d) {
  for (const DTypeRow& r : kDTypes) {
    if (r.d == d) return r.size;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at open: cannot overflow
  return n;
}

struct SafetensorsParser {
  static Status run(SafetensorsFile& f, const uint8_t* base, uint64_t size);
  static Status entry(const std::string& label, const std::string& name, const nlohmann::json& v,
                      uint64_t data_size, TensorInfo* t);
};

Status SafetensorsParser::entry(const std::string& label, const std::string& name, const nlohmann::json& v,
                                uint64_t data_size, TensorInfo* t) {
  auto bad = [&](const std::string& rule) -> Status { return err("{}: tensor '{}': {}", label, name, rule); };
  if (name.empty()) return err("{}: tensor with an empty name", label);
  if (!v.is_object()) return bad(fmt::format("entry is not a JSON object (got {})", v.type_name()));
  for (const auto& [k, _] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      return bad(fmt::format("unexpected key '{}' (allowed: dtype, shape, data_offsets)", k));
    }
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) return bad(fmt::format("missing key '{}'", k));
  }
  t->name = name;
  const nlohmann::json& jd = v["dtype"];
  if (!jd.is_string()) return bad(fmt::format("dtype is not a string"));
  auto d = dtype_from_name(jd.get_ref<const std::string&>());
  if (!d) return bad(fmt::format("{}", d.message()));
  t->dtype = *d;

  const nlohmann::json& js = v["shape"];
  if (!js.is_array()) return bad(fmt::format("shape is not a list of non-negative integers"));
  for (const auto& e : js) {
    uint64_t dim = 0;
    if (!get_u64(e, &dim))
      return bad(fmt::format("shape is not a list of non-negative integers (element {})", e.dump()));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad(fmt::format("shape dimension {} exceeds 2^63-1", dim));
    }
    t->shape.push_back(static_cast<int64_t>(dim));
  }

  const nlohmann::json& jo = v["data_offsets"];
  if (!jo.is_array() || jo.size() != 2 || !get_u64(jo[0], &t->begin) || !get_u64(jo[1], &t->end)) {
    return bad(fmt::format("data_offsets is not [begin, end] of non-negative integers (got {})", jo.dump()));
  }
  if (t->begin > t->end) return bad(fmt::format("data_offsets begin {} > end {}", t->begin, t->end));

  auto nbytes = tensor_nbytes(t->shape, t->dtype);
  if (!nbytes) return bad(fmt::format("{}", nbytes.message()));
  if (*nbytes != t->end - t->begin) {
    return bad(
        fmt::format("shape {} x dtype {} ({} bytes each) = {} bytes, but data_offsets [{}, {}] span {} bytes",
                    shape_str(t->shape), dtype_name(t->dtype), dtype_size(t->dtype), *nbytes, t->begin,
                    t->end, t->end - t->begin));
  }
  if (t->end > data_size) {
    return bad(fmt::format("data_offsets [{}, {}] extend beyond the data region of {} bytes", t->begin,
                           t->end, data_size));
  }
  return {};
}

Status SafetensorsParser::run(SafetensorsFile& f, const uint8_t* base, uint64_t size) {
  const std::string& label = f.path_;
  f.size_ = size;
  if (size < 8) return err("{}: file is {} bytes, shorter than the 8-byte header length", label, size);
  const uint64_t n = read_le64(base);
  if (n > kMaxHeaderBytes) {
    return err("{}: header length {} exceeds the {} byte limit", label, n, kMaxHeaderBytes);
  }
  if (n > size - 8) {
    return err("{}: header length {} runs past the end of the file ({} bytes after the length prefix)", label,
               n, size - 8);
  }
  std::string_view hdr(reinterpret_cast<const char*>(base + 8), n);
  if (size_t bad = find_invalid_utf8(hdr); bad != std::string_view::npos) {
    return err("{}: header is not valid UTF-8 (byte {} of the header)", label, bad);
  }
  // nlohmann treats a NUL byte as the end of input, which would hide whatever follows it.
  if (size_t z = hdr.find('\0'); z != std::string_view::npos) {
    return err("{}: header contains a NUL byte at byte {}", label, z);
  }
  if (hdr.empty() || hdr.front() != '{') {
    return err(
        "{}: header does not begin with '{{' (the safetensors spec allows only trailing space padding)",
        label);
  }
  // The container has exactly three levels: root object, entry object, shape/offset list.
  auto parsed = parse_json_strict(hdr, label + ": header", /*max_depth=*/3);
  if (!parsed) return parsed.status();
  // nlohmann accepts any JSON whitespace after the value; the spec pads with spaces only.
  {
    size_t last = hdr.find_last_not_of(' ');
    if (hdr[last] != '}') {
      return err("{}: header has trailing bytes other than space padding after the JSON object", label);
    }
  }
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return err("{}: header is not a JSON object (got {})", label, j.type_name());

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  f.tensors_.reserve(j.size());
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return err("{}: __metadata__ is not a JSON object of string -> string", label);
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) {
          return err("{}: __metadata__ value for key '{}' is not a string (got {})", label, mk,
                     mv.type_name());
        }
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    GRIDQ_RETURN_IF_ERROR(entry(label, name, v, data_size, &t));
    t.data = base + data_start + t.begin;
    f.tensors_.push_back(std::move(t));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : f.tensors_) {
    if (t.begin < pos) {
      return err("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", label, t.name,
                 t.begin, t.end, prev->name, prev->begin, prev->end);
    }
    if (t.begin > pos) {
      return err(
          "{}: tensor '{}': gap of {} unused bytes before data_offsets [{}, {}] (spans must be "
          "contiguous from offset 0)",
          label, t.name, t.begin - pos, t.begin, t.end);
    }
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size) {
    return err(
        "{}: {} trailing bytes in the data region after the last tensor (tensors cover {} of {} bytes)",
        label, data_size - pos, pos, data_size);
  }
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return {};
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, size_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(std::span<const uint8_t> buf,
                                                                  std::string label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(label);
  GRIDQ_RETURN_IF_ERROR(SafetensorsParser::run(*f, buf.data(), buf.size()));
  return f;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return err("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return err("{}: not a regular file", path);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return err("{}: file is {} bytes, shorter than the 8-byte header length", path, size);
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) return err("{}: mmap failed: {}", path, std::strerror(e));
  f->map_ = m;
  f->size_ = size;
  GRIDQ_RETURN_IF_ERROR(SafetensorsParser::run(*f, static_cast<const uint8_t*>(m), size));
  return f;
}

}  // namespace gridq::io
