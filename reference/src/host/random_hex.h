// Random names for what the runtime creates (sandbox ids, runtime ids, probe containers): one
// helper, so that every name is drawn the same way. Not for secrets: tokens come from
// getrandom() where they are made (sandboxd's config, the client).
//
// Thread-safety: thread-safe (one generator per thread, seeded from std::random_device).
#pragma once

#include <string>

namespace sbx::host {

// 2 × `bytes` lowercase hex digits.
std::string RandomHex(int bytes);

}  // namespace sbx::host
