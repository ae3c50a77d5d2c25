#include "wire/token.h"

#include <fmt/format.h>
#include <string.h>

#include <cctype>

namespace sbx::wire {
namespace {

bool IsToken68Char(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

}  // namespace

void ZeroString(std::string* s) {
  if (!s->empty()) explicit_bzero(s->data(), s->size());
  s->clear();
}

Status ValidateToken(std::string_view token) {
  // Never echo the token in the message: it is a secret even when it is a bad one.
  if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
    return InvalidArgument(fmt::format("token must be {}..{} characters (got {})", kMinTokenLength,
                                       kMaxTokenLength, token.size()));
  }
  size_t i = 0;
  while (i < token.size() && IsToken68Char(static_cast<unsigned char>(token[i]))) ++i;
  while (i < token.size() && token[i] == '=') ++i;
  if (i != token.size()) {
    return InvalidArgument("token may contain only A-Z a-z 0-9 - . _ ~ + / (and trailing '=')");
  }
  return Status::Ok();
}

}  // namespace sbx::wire
