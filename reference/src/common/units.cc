#include "sbx/units.h"

#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace sbx {
namespace {

// Splits "1.5Gi" into a decimal number and a suffix. Only digits and one '.' are accepted:
// no sign, no exponent, no spaces, no hex — each is a likely typo.
Status SplitNumber(std::string_view text, std::string_view what, double* number,
                   std::string_view* suffix) {
  if (text.empty()) return InvalidArgument(fmt::format("{}: empty value", what));
  size_t i = 0;
  bool dot = false;
  bool digits = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) ||
                             (text[i] == '.' && !dot))) {
    if (text[i] == '.') dot = true; else digits = true;
    ++i;
  }
  if (!digits) {
    return InvalidArgument(fmt::format("{}: '{}' does not start with a number", what, text));
  }
  std::string num(text.substr(0, i));
  if (num.size() > 24) return InvalidArgument(fmt::format("{}: '{}' is too long", what, text));
  *number = std::strtod(num.c_str(), nullptr);
  *suffix = text.substr(i);
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> ParseMillicores(std::string_view text) {
  double n = 0;
  std::string_view suffix;
  RETURN_IF_ERROR(SplitNumber(text, "cpu", &n, &suffix));
  double milli = 0;
  if (suffix.empty()) {
    milli = n * 1000.0;
  } else if (suffix == "m") {
    milli = n;
  } else {
    return InvalidArgument(fmt::format(
        "cpu: unknown unit '{}' in '{}' (use millicores like 500m or cores like 1.5)", suffix, text));
  }
  if (milli < 1.0 || milli > 1024.0 * 1000.0) {
    return InvalidArgument(fmt::format("cpu: '{}' out of range (1m .. 1024 cores)", text));
  }
  if (std::fabs(milli - std::round(milli)) > 1e-9) {
    return InvalidArgument(fmt::format("cpu: '{}' is finer than one millicore", text));
  }
  return static_cast<int64_t>(std::llround(milli));
}

StatusOr<int64_t> ParseBytes(std::string_view text) {
  double n = 0;
  std::string_view suffix;
  RETURN_IF_ERROR(SplitNumber(text, "size", &n, &suffix));
  struct Unit {
    std::string_view name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},          {"B", 1},
      {"Ki", 1024.0},   {"KiB", 1024.0},  {"Mi", 1048576.0},  {"MiB", 1048576.0},
      {"Gi", 1073741824.0}, {"GiB", 1073741824.0}, {"Ti", 1099511627776.0}, {"TiB", 1099511627776.0},
      {"k", 1e3},       {"K", 1e3},       {"KB", 1e3},        {"M", 1e6},
      {"MB", 1e6},      {"G", 1e9},       {"GB", 1e9},        {"T", 1e12},  {"TB", 1e12},
  };
  for (const Unit& u : kUnits) {
    if (suffix == u.name) {
      double bytes = n * u.factor;
      if (bytes < 1.0 || bytes >= 4.6e18) {
        return InvalidArgument(fmt::format("size: '{}' out of range", text));
      }
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return InvalidArgument(fmt::format(
      "size: unknown unit '{}' in '{}' (use B, Ki, Mi, Gi, Ti, k, M, G, T)", suffix, text));
}

StatusOr<double> ParseSeconds(std::string_view text) {
  double n = 0;
  std::string_view suffix;
  RETURN_IF_ERROR(SplitNumber(text, "duration", &n, &suffix));
  double s = 0;
  if (suffix.empty() || suffix == "s") s = n;
  else if (suffix == "ms") s = n / 1000.0;
  else if (suffix == "m") s = n * 60.0;
  else return InvalidArgument(fmt::format("duration: unknown unit '{}' in '{}' (use s, ms, m)", suffix, text));
  if (s <= 0 || s > 86400) return InvalidArgument(fmt::format("duration: '{}' out of range (0 .. 1 day)", text));
  return s;
}

StatusOr<int64_t> ParseCount(std::string_view text, int64_t max) {
  if (text.empty()) return InvalidArgument("count: empty value");
  int64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return InvalidArgument(fmt::format("count: '{}' is not a positive integer", text));
    }
    v = v * 10 + (c - '0');
    if (v > max) return InvalidArgument(fmt::format("count: '{}' is larger than {}", text, max));
  }
  if (v <= 0) return InvalidArgument(fmt::format("count: '{}' must be at least 1", text));
  return v;
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kSuffix[] = {"", "Ki", "Mi", "Gi", "Ti"};
  int i = 0;
  int64_t v = bytes;
  while (i < 4 && v >= 1024 && v % 1024 == 0) { v /= 1024; ++i; }
  return fmt::format("{}{}", v, kSuffix[i]);
}

}  // namespace sbx
