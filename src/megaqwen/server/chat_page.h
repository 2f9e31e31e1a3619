// The chat page served at GET /: one self-contained HTML file (chat_page.html, embedded at build
// time) that talks to /v1/chat/completions with fetch and reads the server-sent events itself.
#pragma once

#include <string_view>

namespace megaqwen::server {

std::string_view chat_page_html();

}  // namespace megaqwen::server
