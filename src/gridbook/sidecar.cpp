#include "gridbook/sidecar.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "io/safetensors.h"
#include "io/sha256.h"

namespace gridq::gridbook {

std::string codebook_table_name(std::string_view ref, const Rung& rung, int sub) {
  return fmt::format("cb_codebook.{}.{}.sub{}", ref, rung.name(), sub);
}

std::string codebook_digest(std::span<const uint16_t> f16) {
  std::vector<uint8_t> le(f16.size() * 2);
  for (size_t i = 0; i < f16.size(); ++i) {
    le[2 * i] = static_cast<uint8_t>(f16[i] & 0xFF);
    le[2 * i + 1] = static_cast<uint8_t>(f16[i] >> 8);
  }
  return io::sha256_hex(le);
}

Expected<Sidecar> Sidecar::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("{}: cannot open codebook sidecar", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return err("{}: read error", path);
  return parse(std::move(bytes), path);
}

Expected<Sidecar> Sidecar::parse(std::vector<uint8_t> bytes, const std::string& label) {
  GRIDQ_ASSIGN_OR_RETURN(auto st, io::SafetensorsFile::parse(bytes, label));
  Sidecar sc;
  sc.label_ = label;
  for (const auto& t : st->tensors()) {
    if (t.dtype != io::DType::F16) {
      return err("{}: codebook table '{}' has dtype {}, must be F16 (format.md §10)", label, t.name,
                 io::dtype_name(t.dtype));
    }
    if (t.shape.size() != 2) return err("{}: codebook table '{}' must be 2-D", label, t.name);
    CodebookTable tab;
    tab.name = t.name;
    tab.rows = t.shape[0];
    tab.cols = t.shape[1];
    // Digest and decoded values come from the same in-memory bytes (format.md §10: read the file once).
    tab.sha256 = io::sha256_hex(t.bytes());
    tab.f16.resize(static_cast<size_t>(t.numel()));
    const uint8_t* p = t.data;
    for (size_t i = 0; i < tab.f16.size(); ++i) {
      tab.f16[i] = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    }
    sc.tables_.push_back(std::move(tab));
  }
  std::sort(sc.tables_.begin(), sc.tables_.end(),
            [](const CodebookTable& a, const CodebookTable& b) { return a.name < b.name; });
  return sc;
}

const CodebookTable* Sidecar::find(std::string_view name) const {
  for (const auto& t : tables_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status write_sidecar(const std::string& path, const std::vector<CodebookTable>& tables_in) {
  std::vector<CodebookTable> tables = tables_in;
  std::sort(tables.begin(), tables.end(),
            [](const CodebookTable& a, const CodebookTable& b) { return a.name < b.name; });
  std::vector<io::SafetensorsWriter::Decl> decls;
  for (const auto& t : tables) {
    if (static_cast<int64_t>(t.f16.size()) != t.rows * t.cols) {
      return err("{}: table '{}' holds {} values, shape [{}, {}]", path, t.name, t.f16.size(), t.rows,
                 t.cols);
    }
    decls.push_back({t.name, io::DType::F16, {t.rows, t.cols}});
  }
  GRIDQ_ASSIGN_OR_RETURN(auto w, io::SafetensorsWriter::create(path, std::move(decls)));
  for (const auto& t : tables) {
    std::vector<uint8_t> le(t.f16.size() * 2);
    for (size_t i = 0; i < t.f16.size(); ++i) {
      le[2 * i] = static_cast<uint8_t>(t.f16[i] & 0xFF);
      le[2 * i + 1] = static_cast<uint8_t>(t.f16[i] >> 8);
    }
    GRIDQ_RETURN_IF_ERROR(w->write(le));
  }
  return w->finish();
}

Status verify_codebook_provenance(const std::optional<std::map<std::string, std::string>>& digests,
                                  const Sidecar& sidecar) {
  if (!digests) return Status();
  if (digests->empty()) return err("provenance.codebook_sha256 is empty (format.md §10: refuse)");
  for (const auto& [name, hex] : *digests) {
    const CodebookTable* t = sidecar.find(name);
    if (t == nullptr) {
      return err("provenance.codebook_sha256 names '{}', which {} does not contain (format.md §10)", name,
                 sidecar.label());
    }
    if (t->sha256 != hex) {
      return err("{}: codebook table '{}' has SHA-256 {}, provenance.codebook_sha256 says {} (format.md §10)",
                 sidecar.label(), name, t->sha256, hex);
    }
  }
  for (const auto& t : sidecar.tables()) {
    if (!digests->count(t.name)) {
      return err(
          "{}: codebook table '{}' is not bound by provenance.codebook_sha256 (format.md §10: unbound "
          "extra table)",
          sidecar.label(), t.name);
    }
  }
  return Status();
}

std::map<std::string, std::string> codebook_digests(const std::vector<CodebookTable>& tables) {
  std::map<std::string, std::string> m;
  for (const auto& t : tables) m[t.name] = codebook_digest(t.f16);
  return m;
}

}  // namespace gridq::gridbook
