#include "text/chat.h"

#include <filesystem>

#include "core/file_read.h"
#include "text/content_escape.h"

namespace gridq::text {

using ojson = nlohmann::ordered_json;

namespace {

// tokenizer_config.json stores special tokens as a string or as an AddedToken object {"content": ...}.
std::string token_text(const ojson& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return {};
  const ojson& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return {};
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_source(std::string_view source, const ojson& cfg,
                                                 const std::string& name) {
  jinja::TemplateOptions opts;
  opts.name = name;
  auto t = jinja::Template::parse(source, opts);
  if (!t) return t.error();
  ChatTemplate ct{std::move(*t),
                  std::string(source),
                  token_text(cfg, "bos_token"),
                  token_text(cfg, "eos_token"),
                  token_text(cfg, "pad_token"),
                  token_text(cfg, "unk_token")};
  return ct;
}

Expected<ChatTemplate> ChatTemplate::load(const std::string& dir) {
  namespace fs = std::filesystem;
  ojson cfg;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (fs::exists(cfg_path)) {
    GRIDQ_ASSIGN_OR_RETURN(std::string text, read_file_bytes(cfg_path));
    cfg = ojson::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return err("{}: not a JSON object", cfg_path);
  }
  const std::string jinja_path = dir + "/chat_template.jinja";
  if (fs::exists(jinja_path)) {
    GRIDQ_ASSIGN_OR_RETURN(std::string src, read_file_bytes(jinja_path));
    return from_source(src, cfg, jinja_path);
  }
  if (cfg.is_object() && cfg.contains("chat_template")) {
    const ojson& ct = cfg["chat_template"];
    if (ct.is_string()) return from_source(ct.get<std::string>(), cfg, cfg_path + ":chat_template");
    if (ct.is_array()) {  // named templates: use "default"
      for (const auto& e : ct)
        if (e.is_object() && e.value("name", std::string()) == "default" && e.contains("template") &&
            e["template"].is_string())
          return from_source(e["template"].get<std::string>(), cfg, cfg_path + ":chat_template[default]");
      return err("{}: chat_template is a list without a \"default\" entry", cfg_path);
    }
    return err("{}: chat_template is neither a string nor a list", cfg_path);
  }
  return err("{}: no chat template (neither chat_template.jinja nor tokenizer_config.json \"chat_template\")",
             dir);
}

Expected<ojson> decode_tool_call_arguments(const ojson& messages) {
  if (!messages.is_array()) return err("chat: messages must be a JSON array");
  ojson out = messages;
  for (size_t i = 0; i < out.size(); ++i) {
    ojson& m = out[i];
    if (!m.is_object()) return err("chat: messages[{}] is not an object", i);
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (size_t j = 0; j < m["tool_calls"].size(); ++j) {
      ojson& call = m["tool_calls"][j];
      ojson* holder = call.is_object() && call.contains("function") && call["function"].is_object()
                          ? &call["function"]
                          : &call;
      if (!holder->is_object() || !holder->contains("arguments") || !(*holder)["arguments"].is_string())
        continue;
      const std::string s = (*holder)["arguments"].get<std::string>();
      ojson parsed = ojson::parse(s, nullptr, false);
      if (parsed.is_discarded())
        return err("chat: messages[{}].tool_calls[{}] arguments are not valid JSON: {}", i, j, s);
      (*holder)["arguments"] = std::move(parsed);
    }
  }
  return out;
}

Expected<std::string> render_chat(const ChatTemplate& tmpl, const ojson& messages, const ojson& tools,
                                  bool add_generation_prompt, const ojson& extra_kwargs) {
  GRIDQ_ASSIGN_OR_RETURN(ojson msgs, decode_tool_call_arguments(messages));
  if (!tools.is_null() && !tools.is_array()) return err("chat: tools must be null or a JSON array");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    return err("chat: template kwargs must be a JSON object");
  ojson ctx = ojson::object();
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = tmpl.bos_token;
  ctx["eos_token"] = tmpl.eos_token;
  if (!tmpl.pad_token.empty()) ctx["pad_token"] = tmpl.pad_token;
  if (!tmpl.unk_token.empty()) ctx["unk_token"] = tmpl.unk_token;
  if (extra_kwargs.is_object()) {
    for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
      for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
        if (it.key() == reserved)
          return err("chat: template kwarg '{}' may not replace a reserved variable", it.key());
      ctx[it.key()] = it.value();
    }
  }
  return tmpl.tmpl.render(ctx);
}

Expected<std::vector<int32_t>> encode_chat_prompt(const Tokenizer& tok, const ChatTemplate& tmpl,
                                                  const ojson& messages, const ojson& tools,
                                                  bool add_generation_prompt, const ojson& extra_kwargs,
                                                  bool allow_special_tokens) {
  if (allow_special_tokens) {
    GRIDQ_ASSIGN_OR_RETURN(std::string prompt,
                           render_chat(tmpl, messages, tools, add_generation_prompt, extra_kwargs));
    return tok.try_encode(prompt, /*add_special_tokens=*/false, /*match_added_tokens=*/true);
  }
  GRIDQ_ASSIGN_OR_RETURN(
      std::string prompt,
      render_chat(tmpl, escape_added_tokens(messages, tok), escape_added_tokens(tools, tok),
                  add_generation_prompt, escape_added_tokens(extra_kwargs, tok)));
  return tok.try_encode_rendered(prompt);
}

}  // namespace gridq::text
