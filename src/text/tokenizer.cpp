#include "text/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/byte_level.h"
#include "text/content_escape.h"
#include "text/utf8.h"

namespace gridq::text {

using json = nlohmann::json;

namespace {

Status check_normalizer(const json& j, const std::string& src) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", std::string("?"));
  if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array() &&
      j["normalizers"].empty())
    return {};
  return err(
      "{}: normalizer '{}' is not supported (gridq supports tokenizers without a normalizer; NFC and "
      "others would need Unicode normalization tables)",
      src, type);
}

Status check_decoder(const json& j, const std::string& src) {
  if (j.is_object() && j.value("type", std::string()) == "ByteLevel") return {};
  if (j.is_object() && j.value("type", std::string()) == "Sequence" && j.contains("decoders") &&
      j["decoders"].is_array() && j["decoders"].size() == 1)
    return check_decoder(j["decoders"][0], src);
  return err("{}: decoder {} is not supported (only ByteLevel)", src,
             j.is_null() ? std::string("null") : j.value("type", std::string("?")));
}

// Reads a post-processor into the ids it puts before and after sequence A.
Status read_post(const json& j, const std::string& src, const std::unordered_map<std::string, int32_t>& ids,
                 std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (j.is_null()) return {};
  const std::string type = j.value("type", std::string("?"));
  if (type == "ByteLevel") return {};  // only adjusts offsets
  if (type == "Sequence") {
    for (const auto& p : j.value("processors", json::array()))
      GRIDQ_RETURN_IF_ERROR(read_post(p, src, ids, prefix, suffix));
    return {};
  }
  if (type == "TemplateProcessing") {
    const json& single = j.value("single", json::array());
    const json& specials = j.value("special_tokens", json::object());
    bool seen_a = false;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        if (item["Sequence"].value("id", std::string("A")) != "A")
          return err("{}: TemplateProcessing single template uses sequence B", src);
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", std::string());
        if (!specials.contains(name))
          return err("{}: TemplateProcessing special token '{}' is not defined", src, name);
        for (const auto& id : specials[name].value("ids", json::array()))
          (seen_a ? suffix : prefix).push_back(id.get<int32_t>());
      } else {
        return err("{}: TemplateProcessing item {} is not understood", src, item.dump());
      }
    }
    return {};
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* k) -> Expected<int32_t> {
      if (!j.contains(k) || !j[k].is_array() || j[k].size() != 2)
        return err("{}: {} has no {} pair", src, type, k);
      return j[k][1].get<int32_t>();
    };
    auto cls = id_of("cls");
    auto sep = id_of("sep");
    if (!cls) return cls.error();
    if (!sep) return sep.error();
    prefix.push_back(*cls);
    suffix.push_back(*sep);
    return {};
  }
  (void)ids;
  return err(
      "{}: post_processor '{}' is not supported (TemplateProcessing, ByteLevel, Roberta/BertProcessing, "
      "Sequence)",
      src, type);
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("{}: cannot open tokenizer file", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

Expected<Tokenizer> Tokenizer::from_json_text(std::string_view text, const std::string& src) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return err("{}: not a JSON object", src);
  GRIDQ_RETURN_IF_ERROR(check_normalizer(j.value("normalizer", json()), src));
  GRIDQ_RETURN_IF_ERROR(check_decoder(j.value("decoder", json()), src));
  Tokenizer t;
  auto model = BpeModel::from_json(j.value("model", json()));
  if (!model) return err("{}: {}", src, model.message());
  t.model_ = std::make_shared<const BpeModel>(std::move(*model));
  auto pre = PreTokenizer::from_json(j.value("pre_tokenizer", json()));
  if (!pre) return err("{}: {}", src, pre.message());
  t.pre_ = std::make_shared<const PreTokenizer>(std::move(*pre));
  for (const auto& a : j.value("added_tokens", json::array())) {
    AddedToken at;
    if (!a.contains("id") || !a.contains("content") || !a["content"].is_string())
      return err("{}: added_tokens entry {} lacks id/content", src, a.dump());
    at.id = a["id"].get<int32_t>();
    at.content = a["content"].get<std::string>();
    at.special = a.value("special", false);
    at.lstrip = a.value("lstrip", false);
    at.rstrip = a.value("rstrip", false);
    at.single_word = a.value("single_word", false);
    at.normalized = a.value("normalized", !at.special);
    t.added_by_text_[at.content] = at.id;
    t.added_by_id_[at.id] = t.added_.size();
    t.added_.push_back(std::move(at));
  }
  t.matcher_ = std::make_shared<const AddedTokenMatcher>(t.added_);
  GRIDQ_RETURN_IF_ERROR(
      read_post(j.value("post_processor", json()), src, t.added_by_text_, t.post_.prefix, t.post_.suffix));
  return t;
}

Status Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out,
                               std::unordered_map<std::string, std::vector<int32_t>>& cache) const {
  std::vector<std::string> pieces;
  GRIDQ_RETURN_IF_ERROR(pre_->run(std::string(text), pieces));
  for (const auto& p : pieces) {
    auto it = cache.find(p);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      model_->tokenize(p, ids);
      it = cache.emplace(p, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return {};
}

Expected<std::vector<int32_t>> Tokenizer::try_encode(std::string_view raw, bool add_special_tokens,
                                                     bool match_added_tokens) const {
  return encode_impl(raw, add_special_tokens, match_added_tokens, /*unescape=*/false);
}

Expected<std::vector<int32_t>> Tokenizer::try_encode_rendered(std::string_view rendered) const {
  return encode_impl(rendered, /*add_special_tokens=*/false, /*match_added_tokens=*/true, /*unescape=*/true);
}

Expected<std::vector<int32_t>> Tokenizer::encode_impl(std::string_view raw, bool add_special_tokens,
                                                      bool match_added_tokens, bool unescape) const {
  std::string owned;
  std::string_view text = raw;
  if (!utf8_valid(raw)) {
    owned = utf8_lossy(raw);
    text = owned;
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = post_.prefix;
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  std::vector<Segment> segs;
  if (match_added_tokens) {
    matcher_->split(text, segs);
  } else {
    segs.push_back({0, text.size(), -1});
  }
  for (const auto& s : segs) {
    if (s.added_id >= 0) {
      ids.push_back(s.added_id);
    } else if (s.end > s.begin && unescape) {
      const std::string piece = unescape_added_tokens(text.substr(s.begin, s.end - s.begin), *this);
      GRIDQ_RETURN_IF_ERROR(encode_plain(piece, ids, cache));
    } else if (s.end > s.begin) {
      GRIDQ_RETURN_IF_ERROR(encode_plain(text.substr(s.begin, s.end - s.begin), ids, cache));
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                       bool match_added_tokens) const {
  auto r = try_encode(text, add_special_tokens, match_added_tokens);
  if (!r) {
    std::fprintf(stderr, "gridq: fatal: tokenizer: %s\n", r.message().c_str());
    std::abort();
  }
  return std::move(*r);
}

std::string Tokenizer::token_text(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return added_[it->second].content;
  const std::string* s = model_->id_to_token(id);
  return s ? *s : std::string();
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::string t = token_text(id);
  std::string out;
  if (!byte_level_decode(t, out)) return t;  // HF ByteLevel decoder keeps such tokens as they are
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && added_[it->second].special;
}

bool Tokenizer::is_added(int32_t id) const { return added_by_id_.count(id) != 0; }

int32_t Tokenizer::token_id(std::string_view text) const {
  auto it = added_by_text_.find(std::string(text));
  if (it != added_by_text_.end()) return it->second;
  return model_->token_to_id(text);
}

size_t Tokenizer::vocab_size() const {
  int32_t m = model_->max_id();
  for (const auto& a : added_) m = std::max(m, a.id);
  return static_cast<size_t>(m + 1);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return utf8_lossy(bytes);
}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_->is_special(id)) return {};
  pending_ += tok_->token_bytes(id);
  std::string out;
  const size_t used = utf8_lossy_prefix(pending_, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace gridq::text
