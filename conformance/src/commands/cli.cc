#include "commands/cli.h"

#include <fmt/format.h>

#include <cstdio>

namespace sandcheck {

std::string ParsedArgs::Get(const std::string& name, const std::string& def) const {
  auto it = values.find(name);
  return it == values.end() || it->second.empty() ? def : it->second.back();
}

std::vector<std::string> ParsedArgs::All(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? std::vector<std::string>{} : it->second;
}

sbx::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                    const std::vector<OptionSpec>& specs) {
  ParsedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      out.help = true;
      continue;
    }
    if (a == "--") {
      for (++i; i < args.size(); ++i) out.positional.push_back(args[i]);
      break;
    }
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      if (a.size() > 1 && a[0] == '-')
        return sbx::InvalidArgument(fmt::format("unknown option {}", a));
      out.positional.push_back(a);
      continue;
    }
    std::string_view body = std::string_view(a).substr(2);
    size_t eq = body.find('=');
    bool has_inline = eq != std::string_view::npos;
    std::string name(body.substr(0, eq));
    std::string value(has_inline ? body.substr(eq + 1) : std::string_view());
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (!spec) return sbx::InvalidArgument(fmt::format("unknown option --{}", name));
    if (spec->takes_value) {
      if (!has_inline) {
        if (i + 1 >= args.size())
          return sbx::InvalidArgument(fmt::format("--{} needs a value", name));
        value = args[++i];
      }
    } else {
      if (has_inline) return sbx::InvalidArgument(fmt::format("--{} takes no value", name));
      value.assign(1, '1');
    }
    if (!spec->repeatable && out.values.count(name)) {
      return sbx::InvalidArgument(fmt::format("--{} given twice", name));
    }
    out.values[name].push_back(value);
  }
  return out;
}

sbx::StatusOr<std::map<std::string, std::string>> ParseVars(const std::vector<std::string>& items) {
  std::map<std::string, std::string> out;
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return sbx::InvalidArgument(fmt::format("--var '{}': expected NAME=VALUE", item));
    }
    std::string k = item.substr(0, eq);
    if (out.count(k)) return sbx::InvalidArgument(fmt::format("--var {} given twice", k));
    out[k] = item.substr(eq + 1);
  }
  return out;
}

int UsageError(const std::string& cmd, const std::string& message, int code) {
  std::fprintf(stderr, "sandcheck %s: %s\n", cmd.c_str(), message.c_str());
  if (code == kExitUsage) std::fprintf(stderr, "(see sandcheck %s --help)\n", cmd.c_str());
  return code;
}

std::vector<std::string> MaskedCommandLine(const std::vector<std::string>& args) {
  std::vector<std::string> out = {"sandcheck", "run"};
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--token=", 0) == 0 || args[i].rfind("--second-token=", 0) == 0) {
      out.push_back(args[i].substr(0, args[i].find('=')) + "=<token>");
    } else {
      out.push_back(i > 0 && (args[i - 1] == "--token" || args[i - 1] == "--second-token")
                        ? "<token>"
                        : args[i]);
    }
  }
  return out;
}

}  // namespace sandcheck
