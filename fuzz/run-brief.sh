#!/usr/bin/env bash
# Runs every libFuzzer target of the egress parsers for a short time (default 20 s each) from
# its committed seeds, failing on the first crash, leak, sanitizer report or timeout.
#   fuzz/run-brief.sh            # uses $SBX_BUILD (default: <repo>/build)
#   SBX_FUZZ_SECONDS=60 fuzz/run-brief.sh
# New inputs go to a scratch corpus; crash reproducers go to $SBX_BUILD/fuzz/artifacts/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SBX_BUILD:-$ROOT/build}
SECS=${SBX_FUZZ_SECONDS:-20}
ARTIFACTS=$BUILD/fuzz/artifacts
mkdir -p "$ARTIFACTS"
status=0
for t in http_head_fuzz tls_sni_fuzz dns_message_fuzz http_request_fuzz; do
  bin=$BUILD/fuzz/$t
  if [[ ! -x $bin ]]; then
    echo "fuzz: $bin is missing (is clang-14 installed? build target sbx_fuzz)" >&2
    exit 1
  fi
  scratch=$(mktemp -d)
  echo "== fuzz $t (${SECS}s)"
  if ! "$bin" -max_total_time="$SECS" -timeout=5 -rss_limit_mb=1024 -print_final_stats=1 \
       -artifact_prefix="$ARTIFACTS/$t-" "$scratch" "$ROOT/fuzz/corpus/$t" 2>"$scratch.log"; then
    tail -n 60 "$scratch.log" >&2
    echo "fuzz: $t FAILED; reproducer in $ARTIFACTS" >&2
    status=1
  else
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$scratch.log" || true
  fi
  rm -rf "$scratch" "$scratch.log"
done
exit $status
