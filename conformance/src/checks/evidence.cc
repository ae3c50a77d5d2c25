#include "checks/evidence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <sstream>

namespace sandcheck {
namespace {

bool Contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace

const char* WgetOutcomeName(WgetOutcome w) {
  switch (w) {
    case WgetOutcome::kNotRun:
      return "not_run";
    case WgetOutcome::kBadAddress:
      return "bad_address";
    case WgetOutcome::kHttp403:
      return "http_403";
    case WgetOutcome::kHttpError:
      return "http_error";
    case WgetOutcome::kOk:
      return "ok";
    case WgetOutcome::kUnreachable:
      return "network_unreachable";
    case WgetOutcome::kRefused:
      return "connection_refused";
    case WgetOutcome::kTimeout:
      return "timeout";
    case WgetOutcome::kOtherFailure:
      return "other_failure";
  }
  return "other_failure";
}

const char* LookupOutcomeName(LookupOutcome l) {
  switch (l) {
    case LookupOutcome::kNotRun:
      return "not_run";
    case LookupOutcome::kNxdomain:
      return "nxdomain";
    case LookupOutcome::kResolved:
      return "resolved";
    case LookupOutcome::kNoServer:
      return "no_server";
    case LookupOutcome::kOtherError:
      return "other_error";
  }
  return "other_error";
}

NetEvidence ClassifyNetwork(const std::string& out, const std::string& err) {
  NetEvidence e;
  std::vector<std::string> all = Lines(out);
  for (auto& l : Lines(err)) all.push_back(l);
  static const std::regex kExit(R"(^wget_exit=([0-9]+)\s*$)");
  static const std::regex kHttp(R"(server returned error: HTTP/1\.[01] ([0-9]{3}))");
  bool seen_name = false, seen_addr_after_name = false;
  for (const auto& line : all) {
    std::smatch m;
    if (std::regex_match(line, m, kExit)) {
      e.wget_exit = std::atoi(m[1].str().c_str());
      continue;
    }
    if (line.rfind("wget:", 0) == 0 && e.wget_line.empty()) {
      e.wget_line = line;
      if (Contains(line, "bad address")) {
        e.wget = WgetOutcome::kBadAddress;
      } else if (std::regex_search(line, m, kHttp)) {
        e.http_status = std::atoi(m[1].str().c_str());
        e.wget = e.http_status == 403 ? WgetOutcome::kHttp403 : WgetOutcome::kHttpError;
      } else if (Contains(line, "unreachable") || Contains(line, "No route to host")) {
        e.wget = WgetOutcome::kUnreachable;
      } else if (Contains(line, "refused")) {
        e.wget = WgetOutcome::kRefused;
      } else if (Contains(line, "timed out")) {
        e.wget = WgetOutcome::kTimeout;
      } else {
        e.wget = WgetOutcome::kOtherFailure;
      }
      continue;
    }
    // busybox nslookup
    if (Contains(line, "server can't find")) {
      e.lookup_line = line;
      e.lookup = Contains(line, "NXDOMAIN") ? LookupOutcome::kNxdomain : LookupOutcome::kOtherError;
    } else if (Contains(line, "no servers could be reached") ||
               (line.rfind(";;", 0) == 0 && Contains(line, "timed out"))) {
      e.lookup_line = line;
      e.lookup = LookupOutcome::kNoServer;
    } else if (line.rfind("Name:", 0) == 0) {
      seen_name = true;
    } else if (seen_name && line.rfind("Address", 0) == 0) {
      seen_addr_after_name = true;
      if (e.lookup == LookupOutcome::kNotRun) {
        e.lookup = LookupOutcome::kResolved;
        e.lookup_line = line;
      }
    }
  }
  (void)seen_addr_after_name;
  if (e.wget == WgetOutcome::kNotRun && e.wget_exit == 0) e.wget = WgetOutcome::kOk;
  if (e.wget == WgetOutcome::kNotRun && e.wget_exit > 0) e.wget = WgetOutcome::kOtherFailure;
  return e;
}

std::string NetEvidence::Summary() const {
  switch (wget) {
    case WgetOutcome::kBadAddress:
      return lookup == LookupOutcome::kNxdomain ? "NXDOMAIN" : "name not resolved";
    case WgetOutcome::kHttp403:
      return "403 from the gateway";
    case WgetOutcome::kHttpError:
      return fmt::format("HTTP {}", http_status);
    case WgetOutcome::kOk:
      return "connected, data came back";
    case WgetOutcome::kUnreachable:
      return "network unreachable";
    case WgetOutcome::kRefused:
      return "connection refused";
    case WgetOutcome::kTimeout:
      return "timed out";
    case WgetOutcome::kOtherFailure:
      return wget_line.empty() ? "failed" : wget_line;
    case WgetOutcome::kNotRun:
      break;
  }
  switch (lookup) {
    case LookupOutcome::kNxdomain:
      return "NXDOMAIN";
    case LookupOutcome::kResolved:
      return "name resolved";
    case LookupOutcome::kNoServer:
      return "no DNS server reachable";
    case LookupOutcome::kOtherError:
      return lookup_line;
    case LookupOutcome::kNotRun:
      break;
  }
  return "no network output";
}

nlohmann::json NetEvidence::ToJson() const {
  return {{"lookup", LookupOutcomeName(lookup)},
          {"lookup_line", lookup_line},
          {"wget", WgetOutcomeName(wget)},
          {"wget_line", wget_line},
          {"wget_exit", wget_exit},
          {"http_status", http_status},
          {"summary", Summary()}};
}

std::optional<CpuToolOutput> ParseCpuTool(const std::string& out) {
  static const std::regex kLine(R"(wall_seconds ([0-9.]+) cpu_seconds ([0-9.]+) threads ([0-9]+))");
  std::smatch m;
  if (!std::regex_search(out, m, kLine)) return std::nullopt;
  CpuToolOutput c;
  c.wall_seconds = std::strtod(m[1].str().c_str(), nullptr);
  c.cpu_seconds = std::strtod(m[2].str().c_str(), nullptr);
  c.threads = std::atoi(m[3].str().c_str());
  return c;
}

std::optional<int64_t> ParseFileCount(const std::string& out) {
  static const std::regex kCount(R"(^\s*([0-9]+)\s*$)");
  std::smatch m;
  if (!std::regex_match(out, m, kCount)) return std::nullopt;
  return std::strtoll(m[1].str().c_str(), nullptr, 10);
}

namespace {

// The first line of `out` that parses as a JSON object.
std::optional<nlohmann::json> JsonLine(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    std::string line = out.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? out.size() : nl + 1;
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) return j;
  }
  return std::nullopt;
}

bool StringList(const nlohmann::json& j, const char* key, std::vector<std::string>* out) {
  if (!j.contains(key) || !j[key].is_array()) return false;
  for (const auto& x : j[key]) {
    if (!x.is_string()) return false;
    out->push_back(x.get<std::string>());
  }
  return true;
}

}  // namespace

std::optional<CanaryPlant> ParseCanaryPlant(const std::string& out) {
  auto j = JsonLine(out);
  if (!j) return std::nullopt;
  CanaryPlant p;
  if (!StringList(*j, "planted", &p.planted)) return std::nullopt;
  if (j->contains("not_planted") && (*j)["not_planted"].is_object()) {
    for (const auto& [k, v] : (*j)["not_planted"].items()) {
      if (v.is_string()) p.not_planted[k] = v.get<std::string>();
    }
  }
  if (j->contains("port") && (*j)["port"].is_number_integer()) {
    int64_t port = (*j)["port"].get<int64_t>();
    if (port > 0 && port < 65536) p.port = static_cast<int>(port);
  }
  return p;
}

std::optional<CanaryCheck> ParseCanaryCheck(const std::string& out) {
  auto j = JsonLine(out);
  if (!j) return std::nullopt;
  CanaryCheck c;
  if (!StringList(*j, "survivors", &c.survivors) || !StringList(*j, "checked", &c.checked))
    return std::nullopt;
  return c;
}

HogProgress ParseHogProgress(const std::string& out) {
  static const std::regex kLine(R"((allocated|done) ([0-9]{1,9}) MiB)");
  HogProgress h;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), kLine); it != std::sregex_iterator();
       ++it) {
    if ((*it)[1] == "done") {
      h.done = true;
    } else {
      h.last_mib = std::strtoll((*it)[2].str().c_str(), nullptr, 10);
    }
  }
  return h;
}

std::string TailOf(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  return "..." + s.substr(s.size() - n);
}

std::string MirrorLogHost(const std::string& line) {
  size_t at = line.rfind(" host=");
  if (at == std::string::npos) return "";
  std::string h = line.substr(at + 6);
  if (size_t colon = h.find(':'); colon != std::string::npos) h.erase(colon);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  return h;
}

}  // namespace sandcheck
