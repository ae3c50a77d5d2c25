// Data files compiled into the binary (see conformance/cmake/embed.cmake): the scenarios, their
// schema and the requirement catalogue, so that sandcheck works from any directory.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace sandcheck {

struct EmbeddedFile {
  std::string_view path;  // relative to the source tree: "scenarios/six-task.json"
  std::string_view data;
};

const std::vector<EmbeddedFile>& EmbeddedFiles();

inline std::optional<std::string_view> FindEmbedded(std::string_view path) {
  for (const auto& f : EmbeddedFiles()) {
    if (f.path == path) return f.data;
  }
  return std::nullopt;
}

}  // namespace sandcheck
