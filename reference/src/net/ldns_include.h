// Includes ldns for C++. ldns/common.h defines `bool`, `true` and `false` as macros unless
// stdbool.h came first (which in C++ only marks them as defined), so the order matters.
#pragma once

// clang-format off
#include <stdbool.h>  // NOLINT(modernize-deprecated-headers)
#include <ldns/ldns.h>
// clang-format on
