// The head of an HTTP/1.x request as the egress gateway sees it (EGR-1, EGR-3): request line,
// header fields, the Host it names and how its body is framed. Strict on purpose: anything
// ambiguous (bare LF, obs-fold, whitespace before ':', two Host or Content-Length fields, a
// Transfer-Encoding) is reported so the gateway can refuse it rather than guess what the
// upstream server would understand.
//
// Pure and allocation-bounded: fuzzed by fuzz/http_head_fuzz.cc.
// Thread-safety: functions only; no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sbx::net {

inline constexpr size_t kMaxHttpHeadBytes = 16 * 1024;

enum class HttpHeadStatus {
  kNeedMore,   // a prefix of a plausible request: read more bytes
  kNotHttp,    // the bytes do not start like an HTTP request line (the gateway resets)
  kMalformed,  // looks like HTTP but breaks the grammar or our limits (the gateway answers 403)
  kComplete,   // a whole head, up to and including the empty line
};

struct HttpRequestHead {
  std::string method;   // "GET"
  std::string target;   // request-target as sent: "/x" (origin-form), "http://h/x", "h:443", "*"
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> fields;  // name as sent, value trimmed
  size_t head_bytes = 0;  // bytes of the head including the final CRLF CRLF

  // Derived from the fields.
  int host_fields = 0;              // how many Host fields (a valid request has exactly 1)
  std::string host;                 // lower case, without port and brackets; "" if none
  bool host_is_ip_literal = false;  // "1.2.3.4", "[::1]", "0x7f.1", "2130706433"
  int host_port = 0;                // the port written in Host, 0 when none
  int content_length_fields = 0;
  std::optional<uint64_t> content_length;
  bool has_transfer_encoding = false;

  bool origin_form() const { return !target.empty() && target.front() == '/'; }
};

// Parses the start of `data`. On kComplete, `out` is filled. On kMalformed, `error` (if not
// null) says why. A head longer than kMaxHttpHeadBytes is kMalformed.
HttpHeadStatus ParseHttpRequestHead(std::string_view data, HttpRequestHead* out,
                                    std::string* error = nullptr);

// The head sent upstream for an allowed request: the same request line and fields minus the
// hop-by-hop ones (Connection, Keep-Alive, Proxy-Connection, Proxy-Authorization, TE,
// Upgrade), plus "Connection: close" so that one connection carries exactly one request.
std::string UpstreamHead(const HttpRequestHead& head);

}  // namespace sbx::net
