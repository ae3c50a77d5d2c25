// libFuzzer target: the egress gateway's HTTP request-head parser (EGR-1, EGR-3).
// Invariants beyond "no crash, no leak, no UB": a complete head never claims more bytes than it
// was given, and the head the gateway sends upstream parses back to the same request.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "net/http_head.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sbx::net;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  HttpRequestHead head;
  std::string error;
  HttpHeadStatus s = ParseHttpRequestHead(in, &head, &error);
  if (s == HttpHeadStatus::kMalformed && error.empty()) std::abort();
  if (s != HttpHeadStatus::kComplete) return 0;
  if (head.head_bytes > size || head.head_bytes > kMaxHttpHeadBytes) std::abort();
  if (head.host_fields > 1) std::abort();
  if (head.fields.size() >= 99) return 0;  // the upstream head adds one field
  std::string up = UpstreamHead(head);
  HttpRequestHead again;
  if (ParseHttpRequestHead(up, &again) != HttpHeadStatus::kComplete &&
      up.size() <= kMaxHttpHeadBytes) {
    std::abort();
  }
  if (up.size() <= kMaxHttpHeadBytes &&
      (again.host != head.host || again.method != head.method || again.target != head.target ||
       again.host_port != head.host_port)) {
    std::abort();
  }
  return 0;
}
