#include "megaqwen/util/text_file.h"

#include <fstream>
#include <sstream>

#include "megaqwen/util/error.h"

namespace megaqwen {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

}  // namespace megaqwen
