#include "engine/util/error.h"

namespace paralab::detail {

void throw_check_failure(const char* expr, const char* file, int line,
                         const std::string& message) {
    std::string text = message;
    text += " (check `";
    text += expr;
    text += "` failed at ";
    text += file;
    text += ":";
    text += std::to_string(line);
    text += ")";
    throw Error(text);
}

}  // namespace paralab::detail
