// gridq pin ARTIFACT: writes ARTIFACT/PINS.json (SHA-256 and size of every file) so `gridq serve` can refuse
// a modified artifact; --verify checks an existing PINS.json instead.
#include <filesystem>

#include "cli/command.h"
#include "io/pins.h"

namespace gridq::cli {
namespace {

struct PinOpts {
  std::string dir;
  bool verify = false;
};

int run_pin(const PinOpts& o) {
  if (!std::filesystem::is_directory(o.dir)) return fail(o.dir + ": not a directory");
  if (o.verify) {
    Status st = io::verify_pins(o.dir);
    if (!st.ok()) return fail(st.message());
    std::printf("%s: every file matches %s\n", o.dir.c_str(), io::kPinsFile);
    return 0;
  }
  Status st = io::write_pins(o.dir);
  if (!st.ok()) return fail(st.message());
  auto pins = io::read_pins(o.dir);
  if (!pins.ok()) return fail(pins.message());
  std::printf("wrote %s/%s (%zu files)\n", o.dir.c_str(), io::kPinsFile, pins->size());
  return 0;
}

Registrar reg({"pin",
               "Write PINS.json (SHA-256 of every artifact file) so serve can verify it\n"
               "Examples:\n"
               "  gridq pin build/demo/laguna-tiny-code-gridbook\n"
               "  gridq pin build/demo/laguna-tiny-code-gridbook --verify\n",
               [](CLI::App& sub) -> std::function<int()> {
                 auto o = std::make_shared<PinOpts>();
                 sub.add_option("ARTIFACT", o->dir, "artifact or checkpoint directory")->required();
                 sub.add_flag("--verify", o->verify,
                              "check the directory against its PINS.json instead of writing");
                 return [o] { return run_pin(*o); };
               }});

}  // namespace
}  // namespace gridq::cli
