// The routes that answer from the server's own state and the tokenizer, without the scheduler (api.md §1):
// /v1/models (and one model), /version, /health, /metrics, /tokenize, /detokenize.
#include <fmt/format.h>

#include "core/version.h"
#include "serve/api_job.h"
#include "serve/api_server.h"
#include "serve/openai_fields.h"

namespace gridq::serve {

namespace {

// %XX escapes of a path segment (clients escape a '/' inside a model id as %2F).
std::string percent_decode(std::string_view s) {
  std::string out;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

ojson ApiServer::model_json(const std::string& name) const {
  ojson m = ojson::object();
  m["id"] = name;
  m["object"] = "model";
  m["created"] = created_;
  m["owned_by"] = "gridq";
  m["max_model_len"] = model_.max_model_len;
  return m;
}

void ApiServer::handle_model(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch) {
  if (state_ == State::kLoading)
    return ch->send_error(status_error(503, "unavailable_error", "loading", "the model is still loading"));
  const std::string id =
      percent_decode(std::string_view(req.path).substr(std::string_view("/v1/models/").size()));
  for (const auto& n : model_.served_names)
    if (n == id) return ch->send(200, "application/json", dump(model_json(n)));
  check_model(id, *ch);  // answers 404 model_not_found
}

void ApiServer::handle_version(const HttpRequest&, std::shared_ptr<ResponseChannel> ch) {
  ojson out = ojson::object();
  out["version"] = version_string();
  ch->send(200, "application/json", dump(out));
}

void ApiServer::handle_models(const HttpRequest&, std::shared_ptr<ResponseChannel> ch) {
  if (state_ == State::kLoading)
    return ch->send_error(status_error(503, "unavailable_error", "loading", "the model is still loading"));
  ojson data = ojson::array();
  for (const auto& n : model_.served_names) data.push_back(model_json(n));
  ojson out = ojson::object();
  out["object"] = "list";
  out["data"] = std::move(data);
  ch->send(200, "application/json", dump(out));
}

void ApiServer::handle_health(const HttpRequest&, std::shared_ptr<ResponseChannel> ch) {
  State s = state_;
  if (s == State::kReady && (http_.draining())) s = State::kDraining;
  if (s == State::kReady && sched_ && sched_->failed()) s = State::kFailed;
  if (s == State::kReady) return ch->send(200, "application/json", "{\"status\":\"ok\"}");
  const char* code = s == State::kLoading    ? "loading"
                     : s == State::kDraining ? "shutting_down"
                                             : "engine_failed";
  ch->send_error(status_error(503, "unavailable_error", code, std::string("not ready: ") + code));
}

void ApiServer::handle_metrics(const HttpRequest&, std::shared_ptr<ResponseChannel> ch) {
  ch->send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render());
}

// A prompt string becomes the ids /v1/completions would send for it, so a count taken here holds there:
// special-token text is text unless "allow_special_tokens" (api.md §2). vLLM's fields are taken too:
// "add_special_tokens" adds the tokenizer's post-processor tokens (a BOS, where the tokenizer has one), off
// by default because /v1/completions adds none; "return_token_strs" lists each id's token text.
void ApiServer::handle_tokenize(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch) {
  ojson body;
  if (!prepare(req, *ch, body)) return;
  if (!body.is_object() || !body.contains("prompt") || !body["prompt"].is_string())
    return ch->send_error(invalid("prompt", "prompt must be a string"));
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return ch->send_error(invalid("model", "model must be a string"));
    if (!check_model(m->get<std::string>(), *ch)) return;
  }
  bool allow_special = false, add_special = false, token_strs = false;
  for (auto [key, out] : {std::pair<const char*, bool*>{"allow_special_tokens", &allow_special},
                          {"add_special_tokens", &add_special},
                          {"return_token_strs", &token_strs}})
    if (auto e = fields::get_bool(body, key, *out)) return ch->send_error(*e);
  auto ids = model_.tok->try_encode(body["prompt"].get_ref<const std::string&>(), add_special, allow_special);
  if (!ids.ok()) return ch->send_error(invalid("prompt", ids.message()));
  ojson out = ojson::object();
  out["count"] = ids->size();
  out["max_model_len"] = model_.max_model_len;
  out["tokens"] = *ids;
  if (token_strs) {
    ojson strs = ojson::array();
    for (int32_t id : *ids) strs.push_back(model_.tok->token_text(id));
    out["token_strs"] = std::move(strs);
  }
  ch->send(200, "application/json", dump(out));
}

void ApiServer::handle_detokenize(const HttpRequest& req, std::shared_ptr<ResponseChannel> ch) {
  ojson body;
  if (!prepare(req, *ch, body)) return;
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    return ch->send_error(invalid("tokens", "tokens must be a list of token ids"));
  std::vector<int32_t> ids;
  const int64_t V = static_cast<int64_t>(model_.tok->vocab_size());
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V ||
        (t.is_number_unsigned() && t.get<uint64_t>() >= static_cast<uint64_t>(V)))
      return ch->send_error(
          invalid("tokens", fmt::format("token id {} is out of vocabulary [0, {})", t.dump(), V)));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  ojson out = ojson::object();
  out["prompt"] = model_.tok->decode(ids, false);
  ch->send(200, "application/json", dump(out));
}

}  // namespace gridq::serve
