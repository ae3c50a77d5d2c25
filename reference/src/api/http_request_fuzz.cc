// libFuzzer target: sandboxd's request parser (and the client's response parser and the JSON
// body parser) must never crash, hang or read out of bounds on any bytes, and the incremental
// reader must agree with the one-shot parser however the bytes are split.
//
// Built by fuzz/CMakeLists.txt with clang -fsanitize=fuzzer,address,undefined; run e.g.
//   build-fuzz/fuzz/http_request_fuzz -max_total_time=60 -max_len=20000
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/http_message.h"
#include "sbx/http_client.h"
#include "wire/wire.h"

namespace {

using sbx::api::ParseOutcome;

void Check(bool ok) {
  if (!ok) abort();
}

void CheckRequest(const sbx::api::HttpRequest& r, const sbx::api::ParseLimits& l) {
  Check(!r.method.empty());
  for (char c : r.method) Check(c >= 'A' && c <= 'Z');
  Check(!r.path.empty() && r.path[0] == '/');
  Check(r.body.size() <= l.max_body_bytes);
  Check(r.headers.size() <= l.max_headers);
  for (const auto& h : r.headers) {
    Check(!h.name.empty());
    for (char c : h.value) Check(c != '\r' && c != '\n' && c != '\0');
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks the piece size of the incremental feed; the rest is the stream.
  size_t piece = 1 + data[0] % 64;
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  sbx::api::ParseLimits limits;
  limits.max_header_bytes = 1024;  // small limits so the fuzzer reaches them
  limits.max_body_bytes = 4096;
  limits.max_headers = 8;

  ParseOutcome whole = sbx::api::ParseRequest(input, limits);
  if (whole.kind == ParseOutcome::Kind::kComplete) {
    Check(whole.consumed <= input.size());
    CheckRequest(whole.request, limits);
  }
  if (whole.kind == ParseOutcome::Kind::kError) Check(whole.status >= 400 && whole.status < 600);

  // Incremental, with pipelining: every request the stream holds, in order.
  sbx::api::RequestReader reader(limits);
  size_t pos = 0, requests = 0;
  ParseOutcome first;
  bool have_first = false;
  while (true) {
    ParseOutcome o = reader.Next();
    if (o.kind == ParseOutcome::Kind::kIncomplete) {
      if (pos >= input.size()) {
        if (!have_first) first = o, have_first = true;
        break;
      }
      size_t n = std::min(piece, input.size() - pos);
      reader.Append(input.substr(pos, n));
      pos += n;
      continue;
    }
    if (!have_first) first = o, have_first = true;
    if (o.kind == ParseOutcome::Kind::kError) break;
    CheckRequest(o.request, limits);
    Check(++requests <= input.size());  // every request consumes bytes: no endless loop
  }
  // The reader may refuse earlier (it sees the prefix first), but never disagree on the kind;
  // a complete first request must be the same request.
  Check(first.kind == whole.kind);
  if (whole.kind == ParseOutcome::Kind::kComplete) {
    Check(first.consumed == whole.consumed);
    Check(first.request.body == whole.request.body);
    Check(first.request.target == whole.request.target);
  }

  // What the client reads from a (possibly hostile) server.
  auto resp = sbx::http::ParseResponse(input, data[0] & 1, 4096);
  if (resp.kind == sbx::http::ResponseOutcome::Kind::kComplete)
    Check(resp.response.body.size() <= 4096);

  // Request bodies reach the JSON parser: no input may crash it (deep nesting is refused).
  auto json = sbx::wire::ParseJsonBody(input);
  (void)json;
  return 0;
}
