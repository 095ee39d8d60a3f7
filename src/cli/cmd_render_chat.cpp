// `gridq render-chat MODEL --messages FILE`: prints the chat prompt the model's template renders (utility for
// parity tests against jinja2 and for checking prompts by eye).
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "text/chat.h"

namespace gridq::cli {
namespace {

using ojson = nlohmann::ordered_json;

gridq::Expected<ojson> read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return gridq::err("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  ojson j = ojson::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return gridq::err("{}: not valid JSON", path);
  return j;
}

Registrar reg{Command{
    "render-chat",
    "Print the chat prompt a model's chat template renders for a messages file (MODEL: an HF checkpoint or "
    "artifact directory)\n"
    "Examples:\n"
    "  gridq render-chat models/laguna-tiny-code --messages msgs.json\n"
    "  gridq render-chat models/laguna-tiny-code --messages msgs.json --tools tools.json --ids\n",
    [](CLI::App& sub) -> std::function<int()> {
      struct Opts {
        std::string model, messages, tools, kwargs, template_file;
        bool no_gen = false, ids = false, allow_special = false;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("model", o->model, "model directory (chat_template.jinja / tokenizer_config.json)")
          ->required();
      sub.add_option("--messages", o->messages, "JSON file with the messages array")->required();
      sub.add_option("--tools", o->tools, "JSON file with the tools array");
      sub.add_option("--kwargs", o->kwargs,
                     "JSON object of extra template variables, e.g. {\"enable_thinking\": false}");
      sub.add_option("--template", o->template_file, "use this template file instead of the model's");
      sub.add_flag("--no-generation-prompt", o->no_gen, "render without the generation prompt");
      sub.add_flag("--ids", o->ids, "print the prompt's token ids (JSON) instead of its text");
      sub.add_flag(
          "--allow-special-tokens", o->allow_special,
          "with --ids: special-token text in messages gives the control ids (default: text, as serve)");
      return [o]() -> int {
        auto msgs = read_json(o->messages);
        if (!msgs) return fail(msgs.message());
        ojson tools;
        if (!o->tools.empty()) {
          auto t = read_json(o->tools);
          if (!t) return fail(t.message());
          tools = *t;
        }
        ojson kwargs;
        if (!o->kwargs.empty()) {
          kwargs = ojson::parse(o->kwargs, nullptr, false);
          if (kwargs.is_discarded() || !kwargs.is_object()) return fail("--kwargs: not a JSON object");
        }
        auto tmpl = text::ChatTemplate::load(o->model);
        if (!o->template_file.empty() && tmpl) {
          std::ifstream in(o->template_file, std::ios::binary);
          if (!in) return fail(o->template_file + ": cannot open");
          std::stringstream ss;
          ss << in.rdbuf();
          tmpl = text::ChatTemplate::from_source(
              ss.str(), ojson{{"bos_token", tmpl->bos_token}, {"eos_token", tmpl->eos_token}},
              o->template_file);
        }
        if (!tmpl) return fail(tmpl.message());
        if (o->ids) {
          auto tok = text::Tokenizer::from_file(o->model + "/tokenizer.json");
          if (!tok) return fail(tok.message());
          auto ids =
              text::encode_chat_prompt(*tok, *tmpl, *msgs, tools, !o->no_gen, kwargs, o->allow_special);
          if (!ids) return fail(ids.message());
          std::string out = "[";
          for (size_t i = 0; i < ids->size(); ++i) out += (i ? ", " : "") + std::to_string((*ids)[i]);
          std::cout << out << "]\n";
          return 0;
        }
        auto prompt = text::render_chat(*tmpl, *msgs, tools, !o->no_gen, kwargs);
        if (!prompt) return fail(prompt.message());
        std::cout << *prompt;
        return 0;
      };
    }}};

}  // namespace
}  // namespace gridq::cli
