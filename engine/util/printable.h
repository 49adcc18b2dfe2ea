// Names from files and stores (run names, JSON keys, tensor names) as they may be printed on a
// terminal.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace paralab {

// `text` with its control characters written as \xNN escapes: C0 (newline and tab included),
// DEL, and C1 (U+0080 to U+009F, two bytes in UTF-8), so that a name cannot move the cursor,
// clear the screen, retitle the terminal or forge a line of output. Every other byte is kept
// (UTF-8 text stays readable).
inline std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    auto escape = [&out](unsigned char c) {
        char hex[5];
        std::snprintf(hex, sizeof hex, "\\x%02X", c);
        out += hex;
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            escape(c);
        } else if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
            escape(c);
            escape(static_cast<unsigned char>(text[++i]));
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

// An error message for one line of stderr: as printable(), but its line breaks kept (a
// message may span lines on purpose; the names inside it are escaped where they are put in).
inline std::string printable_message(std::string_view text) {
    std::string out;
    size_t from = 0;
    for (size_t at; (at = text.find('\n', from)) != std::string_view::npos; from = at + 1)
        out += printable(text.substr(from, at - from)) + "\n";
    return out + printable(text.substr(from));
}

}  // namespace paralab
