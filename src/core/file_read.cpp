#include "core/file_read.h"

#include <fstream>
#include <sstream>

namespace gridq {

Expected<std::string> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return err("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace gridq
