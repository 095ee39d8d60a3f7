// `gridq tokenize MODEL`: prints the token ids of a text (utility for parity tests against HF tokenizers).
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "text/tokenizer.h"

namespace gridq::cli {
namespace {

std::string tokenizer_path(const std::string& model) {
  if (model.size() >= 5 && model.substr(model.size() - 5) == ".json") return model;
  return model + "/tokenizer.json";
}

Registrar reg{Command{
    "tokenize",
    "Print the token ids of a text (MODEL: an HF checkpoint or artifact directory, or a tokenizer.json)\n"
    "Examples:\n"
    "  gridq tokenize models/laguna-tiny-code --text \"def f(x):\"\n"
    "  gridq tokenize models/laguna-tiny-code --text-file data/code-eval.txt --json\n",
    [](CLI::App& sub) -> std::function<int()> {
      struct Opts {
        std::string model, text, text_file;
        bool json = false, add_special = false, no_added = false, decode = false;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("model", o->model, "model directory or tokenizer.json")->required();
      auto* t = sub.add_option("--text", o->text, "text to tokenize");
      auto* f = sub.add_option("--text-file", o->text_file, "file whose bytes are tokenized");
      t->excludes(f);
      sub.add_flag("--json", o->json,
                   "print the ids as a JSON list (default: one line of space-separated ids)");
      sub.add_flag("--add-special-tokens", o->add_special, "apply the post-processor (adds BOS etc.)");
      sub.add_flag("--no-added-tokens", o->no_added, "do not match added tokens in the text");
      sub.add_flag("--decode", o->decode, "print decode(encode(text)) instead of ids");
      return [o, t, f]() -> int {
        std::string text = o->text;
        if (f->count() > 0) {
          std::ifstream in(o->text_file, std::ios::binary);
          if (!in) return fail(o->text_file + ": cannot open text file");
          std::stringstream ss;
          ss << in.rdbuf();
          text = ss.str();
        } else if (t->count() == 0) {
          return fail("tokenize: give --text or --text-file");
        }
        auto tok = text::Tokenizer::from_file(tokenizer_path(o->model));
        if (!tok) return fail(tok.message());
        auto ids = tok->try_encode(text, o->add_special, !o->no_added);
        if (!ids) return fail(ids.message());
        if (o->decode) {
          std::cout << tok->decode(*ids);
          return 0;
        }
        std::string out = o->json ? "[" : "";
        for (size_t i = 0; i < ids->size(); ++i) {
          if (i) out += o->json ? ", " : " ";
          out += std::to_string((*ids)[i]);
        }
        out += o->json ? "]\n" : "\n";
        std::cout << out;
        return 0;
      };
    }}};

}  // namespace
}  // namespace gridq::cli
