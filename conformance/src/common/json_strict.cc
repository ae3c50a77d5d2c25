#include "common/json_strict.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace sandcheck {

ObjectReader::ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) {
    first_error_ = sbx::InvalidArgument(fmt::format(
        "{}: expected an object, got {}", path_.empty() ? "(top)" : path_, j_.type_name()));
  }
}

std::string ObjectReader::PathOf(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

void ObjectReader::Fail(std::string_view key, std::string message) {
  if (first_error_.ok())
    first_error_ = sbx::InvalidArgument(fmt::format("{}: {}", PathOf(key), message));
}

bool ObjectReader::Has(std::string_view key) const {
  return j_.is_object() && j_.find(key) != j_.end();
}

void ObjectReader::Ignore(std::string_view key) { known_.emplace(key); }

const json* ObjectReader::Get(std::string_view key, Required req, json::value_t want,
                              const char* type_name) {
  known_.emplace(key);
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    if (req == Required::kYes) Fail(key, "required key missing");
    return nullptr;
  }
  bool ok = false;
  switch (want) {
    case json::value_t::number_float:
      ok = it->is_number();
      break;
    case json::value_t::number_integer:
      ok = it->is_number_integer();
      break;
    default:
      ok = it->type() == want;
      break;
  }
  if (!ok) {
    Fail(key, fmt::format("expected {}, got {} ({})", type_name, it->type_name(), it->dump()));
    return nullptr;
  }
  return &*it;
}

std::string ObjectReader::String(std::string_view key, std::string def, Required req) {
  const json* v = Get(key, req, json::value_t::string, "a string");
  return v ? v->get<std::string>() : def;
}

double ObjectReader::Number(std::string_view key, double def, Required req) {
  const json* v = Get(key, req, json::value_t::number_float, "a number");
  return v ? v->get<double>() : def;
}

int64_t ObjectReader::Integer(std::string_view key, int64_t def, Required req) {
  const json* v = Get(key, req, json::value_t::number_integer, "an integer");
  return v ? v->get<int64_t>() : def;
}

bool ObjectReader::Bool(std::string_view key, bool def, Required req) {
  const json* v = Get(key, req, json::value_t::boolean, "true or false");
  return v ? v->get<bool>() : def;
}

std::vector<std::string> ObjectReader::StringList(std::string_view key, Required req) {
  std::vector<std::string> out;
  const json* v = Get(key, req, json::value_t::array, "an array of strings");
  if (!v) return out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      Fail(fmt::format("{}[{}]", key, i),
           fmt::format("expected a string, got {}", (*v)[i].type_name()));
      return {};
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

std::map<std::string, std::string> ObjectReader::StringMap(std::string_view key, Required req) {
  std::map<std::string, std::string> out;
  const json* v = Get(key, req, json::value_t::object, "an object of strings");
  if (!v) return out;
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it->is_string()) {
      Fail(fmt::format("{}.{}", key, it.key()),
           fmt::format("expected a string, got {}", it->type_name()));
      return {};
    }
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

const json* ObjectReader::Object(std::string_view key, Required req) {
  return Get(key, req, json::value_t::object, "an object");
}

const json* ObjectReader::Array(std::string_view key, Required req) {
  return Get(key, req, json::value_t::array, "an array");
}

sbx::Status ObjectReader::Finish() {
  if (!first_error_.ok()) return first_error_;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (known_.find(it.key()) == known_.end()) {
      std::vector<std::string> k(known_.begin(), known_.end());
      return sbx::InvalidArgument(fmt::format("{}: unknown key '{}' (known keys: {})",
                                              PathOf(it.key()), it.key(), Join(k, ", ")));
    }
  }
  return sbx::Status::Ok();
}

sbx::StatusOr<json> ParseJsonText(std::string_view text, std::string_view origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // Byte offset → line:column, so the user can find the mistake.
    size_t pos = e.byte > 0 ? e.byte - 1 : 0;
    int line = 1, col = 1;
    for (size_t i = 0; i < pos && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    std::string what = e.what();
    auto p = what.find("parse error");
    return sbx::InvalidArgument(fmt::format("{}:{}:{}: malformed JSON: {}", origin, line, col,
                                            p == std::string::npos ? what : what.substr(p)));
  }
}

sbx::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return sbx::ErrnoStatus(fmt::format("cannot read {}", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

sbx::Status MakeDirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return sbx::ErrnoStatus("mkdir " + cur);
  }
  return sbx::Status::Ok();
}

sbx::Status WriteFile(const std::string& path, std::string_view content) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sbx::ErrnoStatus(fmt::format("cannot write {}", tmp));
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return sbx::ErrnoStatus(fmt::format("writing {}", tmp), err);
    }
    off += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return sbx::ErrnoStatus(fmt::format("closing {}", tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return sbx::ErrnoStatus(fmt::format("renaming to {}", path));
  return sbx::Status::Ok();
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

}  // namespace sandcheck
