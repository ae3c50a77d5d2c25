// TEST DOUBLE — see sim.h. Interprets the scenario's commands; emulates busybox's exact output.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "sim.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace sim {
namespace {

bool Has(const Sandbox& sb, const char* fault) { return sb.faults.count(fault) > 0; }

bool IsIpLiteral(const std::string& h) {
  in_addr a;
  return ::inet_pton(AF_INET, h.c_str(), &a) == 1;
}

// The http rule that allows host:port, or "".
std::string RuleFor(const Sandbox& sb, const std::string& host, int port) {
  for (const auto& r : sb.spec.value("egress", json::object()).value("rules", json::array())) {
    if (r.value("kind", "") != "http") continue;
    bool h = false, p = false;
    for (const auto& x : r.value("hosts", json::array())) h = h || x == host;
    for (const auto& x : r.value("ports", json::array())) p = p || x == port;
    if (h && p) return fmt::format("http {}:{}", host, port);
  }
  return "";
}

bool Resolves(const Sandbox& sb, const std::string& name) {
  if (Has(sb, "no-network")) return false;
  if (Has(sb, "dns-resolves-everything") || Has(sb, "no-isolation")) return true;
  return !RuleFor(sb, name, 80).empty();
}

// A real HTTP GET to addr:port (the mirror fixture the harness started), as the gateway would.
bool HttpGet(const std::string& addr_port, const std::string& host, const std::string& path,
             int* status, std::string* body) {
  auto colon = addr_port.rfind(':');
  if (colon == std::string::npos) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::atoi(addr_port.substr(colon + 1).c_str())));
  if (::inet_pton(AF_INET, addr_port.substr(0, colon).c_str(), &sa.sin_addr) != 1) return false;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return false;
  }
  std::string req =
      fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", path, host);
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return false;
  }
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  std::smatch m;
  if (!std::regex_search(raw, m, std::regex(R"(^HTTP/1\.[01] ([0-9]{3}))"))) return false;
  *status = std::atoi(m[1].str().c_str());
  auto head_end = raw.find("\r\n\r\n");
  *body = head_end == std::string::npos ? "" : raw.substr(head_end + 4);
  return true;
}

struct Fetch {
  int exit = 1;
  std::string body, err;
};

Fetch Wget(Sandbox& sb, const std::string& url) {
  static const std::regex kUrl(R"(^http://([^/:]+)(?::([0-9]+))?(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) return {1, "", fmt::format("wget: bad address '{}'\n", url)};
  std::string host = m[1], path = m[3].matched ? m[3].str() : "/";
  int port = m[2].matched ? std::atoi(m[2].str().c_str()) : 80;
  std::string dest = fmt::format("{}:{}", host, port);
  Fetch denied{1, "", "wget: server returned error: HTTP/1.1 403 Forbidden\n"};
  if (IsIpLiteral(host)) {
    if (Has(sb, "no-network"))
      return {
          1, "",
          fmt::format("wget: can't connect to remote host ({}): Network is unreachable\n", host)};
    if (Has(sb, "ip-through") || Has(sb, "no-isolation"))
      return {0, "<html>an outside host</html>\n", ""};
    LogDecision(sb, "http", dest, "", "deny");
    return denied;
  }
  if (!Resolves(sb, host)) {
    if (!Has(sb, "no-network")) LogDecision(sb, "dns", host, "", "nxdomain");
    return {1, "", fmt::format("wget: bad address '{}'\n", host)};
  }
  std::string rule = RuleFor(sb, host, port);
  if (Has(sb, "no-isolation") && rule.empty()) return {0, "<html>an outside host</html>\n", ""};
  if (rule.empty()) {
    LogDecision(sb, "http", dest, "", "deny");
    return denied;
  }
  if (!Has(sb, "no-isolation")) LogDecision(sb, "http", dest, rule, "allow");
  auto hosts = sb.spec.value("hosts", json::object());
  int status = 0;
  std::string body;
  if (!hosts.contains(host) ||
      !HttpGet(hosts[host].get<std::string>(), host, path, &status, &body)) {
    return {1, "", "wget: server returned error: HTTP/1.1 502 Bad Gateway\n"};
  }
  if (status != 200)
    return {1, "", fmt::format("wget: server returned error: HTTP/1.1 {} Error\n", status)};
  return {0, body, ""};
}

std::vector<std::string> Words(const std::string& s) {
  std::stringstream ss(s);
  std::vector<std::string> w;
  std::string x;
  while (ss >> x) w.push_back(x);
  return w;
}

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

ExecOut Simple(Sandbox& sb, const std::string& text, int last_exit) {
  std::vector<std::string> w = Words(text);
  ExecOut r;
  if (w.empty()) return r;
  const std::string& cmd = w[0];
  if (std::regex_match(text, std::regex(R"(\s*find /work -mindepth 1 \| wc -l\s*)"))) {
    size_t n = 0;
    for (auto it = fs::recursive_directory_iterator(sb.work);
         it != fs::recursive_directory_iterator(); ++it)
      ++n;
    r.out = std::to_string(n) + "\n";
  } else if (cmd == "echo") {
    std::string line;
    for (size_t i = 1; i < w.size(); ++i) {
      std::string word = std::regex_replace(w[i], std::regex(R"(\$\?)"), std::to_string(last_exit));
      line += (i > 1 ? " " : "") + word;
    }
    r.out = line + "\n";
  } else if (cmd == "ls") {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(sb.work)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) r.out += n + "\n";
  } else if (cmd == "cat" && w.size() == 2) {
    std::ifstream in(sb.work + "/" + w[1]);
    if (!in)
      return {"ok", "RUNNING", 1, "",
              fmt::format("cat: can't open '{}': No such file or directory\n", w[1])};
    std::stringstream ss;
    ss << in.rdbuf();
    r.out = ss.str();
  } else if (cmd == "nslookup" && w.size() == 2) {
    std::string head = "Server:\t\t10.200.0.1\nAddress:\t10.200.0.1:53\n\n";
    if (Has(sb, "no-network"))
      return {"ok", "RUNNING", 1, ";; connection timed out; no servers could be reached\n\n", ""};
    if (Resolves(sb, w[1])) {
      if (!Has(sb, "no-isolation")) LogDecision(sb, "dns", w[1], "", "answer");
      r.out =
          head + fmt::format("Non-authoritative answer:\nName:\t{}\nAddress: 10.200.0.1\n\n", w[1]);
    } else {
      LogDecision(sb, "dns", w[1], "", "nxdomain");
      r.out = head + fmt::format("** server can't find {}: NXDOMAIN\n\n", w[1]);
      r.exit = 1;
    }
  } else if (cmd == "wget") {
    std::string out_file, url;
    for (size_t i = 1; i < w.size(); ++i) {
      if (w[i] == "-q") continue;
      if (w[i] == "-O-")
        out_file = "-";
      else if (w[i] == "-O" && i + 1 < w.size())
        out_file = w[++i];
      else
        url = w[i];
    }
    Fetch f = Wget(sb, url);
    r.exit = f.exit;
    r.err = f.err;
    if (f.exit == 0) {
      if (out_file == "-" || out_file.empty())
        r.out = f.body;
      else
        std::ofstream(sb.work + "/" + out_file) << f.body;
    }
  } else if (cmd == "sbx-cpu" && w.size() == 3 && w[1] == "-n") {
    const char* scale = std::getenv("SIM_CPU_SECONDS_PER_MILLION");
    double base = std::atof(w[2].c_str()) * (scale ? std::atof(scale) : 1.0 / 600);
    int64_t mc = sb.spec.value("limits", json::object()).value("cpu_millicores", int64_t{0});
    double wall = base;
    if (mc > 0 && !Has(sb, "no-cpu-limit") && !Has(sb, "no-isolation"))
      wall = base * 1000.0 / static_cast<double>(mc);
    Sleep(wall);
    r.out = fmt::format("wall_seconds {:.3f} cpu_seconds {:.3f} threads 1\n", wall, base);
  } else if (cmd == "sbx-memhog" && w.size() == 2) {
    int64_t mib = std::atoll(w[1].c_str());
    int64_t limit = sb.spec.value("limits", json::object()).value("memory_bytes", int64_t{0}) >> 20;
    bool limited = limit > 0 && !Has(sb, "no-memory-limit") && !Has(sb, "no-isolation");
    int64_t reached = limited ? std::min(mib, limit) : mib;
    for (int64_t i = 64; i <= reached; i += 64) r.out += fmt::format("allocated {} MiB\n", i);
    if (!limited || mib < limit) {
      r.out += fmt::format("done {} MiB\n", mib);
    } else if (Has(sb, "oom-as-ok")) {
      r.exit = 137;
      r.err = "Killed\n";
    } else {
      return {"resource_exceeded", "CRASHED", -1, r.out, "memory limit exceeded\n"};
    }
  } else {
    return {"ok", "RUNNING", 127, "", fmt::format("sh: {}: not found\n", cmd)};
  }
  return r;
}

}  // namespace

void LogDecision(const Sandbox& sb, const std::string& protocol, const std::string& destination,
                 const std::string& rule, const std::string& verdict) {
  json d = {{"unix_time", static_cast<double>(std::time(nullptr))},
            {"protocol", protocol},
            {"destination", destination},
            {"rule", rule},
            {"verdict", verdict}};
  std::ofstream(sb.dir + "/gateway.jsonl", std::ios::app) << d.dump() << "\n";
}

ExecOut Interpret(Sandbox& sb, const std::string& cmd, double /*timeout_s*/) {
  // Split on ';', '&&', '||' (the scenario's commands hold no quotes).
  ExecOut total;
  int last = 0;
  std::string op = ";";
  size_t pos = 0;
  while (pos <= cmd.size()) {
    size_t next = std::string::npos;
    std::string next_op;
    for (const char* sep : {"&&", "||", ";"}) {
      size_t p = cmd.find(sep, pos);
      if (p < next) {
        next = p;
        next_op = sep;
      }
    }
    std::string part = cmd.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    bool run = op == ";" || (op == "&&" && last == 0) || (op == "||" && last != 0);
    if (run) {
      ExecOut r = Simple(sb, part, last);
      total.out += r.out;
      total.err += r.err;
      last = r.exit;
      if (r.status != "ok") {
        r.out = total.out;
        r.err = total.err;
        return r;
      }
    }
    if (next == std::string::npos) break;
    op = next_op;
    pos = next + next_op.size();
  }
  total.exit = last;
  return total;
}

}  // namespace sim
