// The whole of a small file (JSON, templates, merges, prompts) as a string.
#pragma once

#include <filesystem>
#include <string>

namespace megaqwen {

// Throws Error "cannot read <path>" when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace megaqwen
