// A worker of the remote backend (BK-7): its own header, so that what needs the description of a
// worker (the backends, sandboxd's config) does not see the whole runtime API.
#pragma once

#include <map>
#include <string>

namespace sbx {

// BK-7: a sandboxd this runtime may place sandboxes on (the remote backend, docs/backends.md).
struct RemoteWorker {
  std::string name;                           // how info, logs and errors name it
  std::string url;                            // unix:PATH, http://HOST:PORT or https://HOST:PORT
  std::map<std::string, std::string> tokens;  // tenant -> that tenant's token on the worker
  // https only (sbx/http_client.h TlsOptions): the worker's CA and/or its certificate's
  // SHA-256 (at least one), and our certificate and key when the worker requires mutual TLS.
  std::string ca_file, pin_sha256, client_cert_file, client_key_file;
};

}  // namespace sbx
