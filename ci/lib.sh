# Shared by ci/demo and ci/test: install what is missing (Debian 12 packages only), configure,
# build incrementally. Source it; it defines sbx_setup.
set -euo pipefail
SBX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SBX_BUILD=${SBX_BUILD:-$SBX_ROOT/build}

# Packages and why (docs/dependencies.md has the full list).
SBX_PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-14 libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libseccomp-dev libcgroup-dev libfmt-dev nlohmann-json3-dev
  libnftables-dev libmnl-dev libldns-dev libssl-dev openssl
  busybox-static iproute2 nftables file
  bubblewrap runc crun runsc
  python3-pytest python3-jsonschema python3-kubernetes libxml2-utils chromium
  wabt wasi-libc libclang-rt-14-dev-wasm32
  qemu-system-x86 lz4
  gdb
)

sbx_log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

sbx_install_deps() {
  local missing=()
  for p in "${SBX_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
      echo "ci: missing packages (${missing[*]}) and not root: run as root" >&2
      exit 3
    fi
    sbx_log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # The microVM guest image is built from Debian's cloud kernel package, fetched at build time
  # with `apt-get download` (fixtures/microvm/build-guest.sh): it needs the package lists.
  if ! apt-cache depends linux-image-cloud-amd64 >/dev/null 2>&1; then
    sbx_log "apt-get update (package lists for the microVM guest's kernel)"
    apt-get update -qq
  fi
}

sbx_build() {
  if [[ ! -f $SBX_BUILD/build.ninja ]]; then
    sbx_log "configure ($SBX_BUILD)"
    cmake -S "$SBX_ROOT" -B "$SBX_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  sbx_log "build"
  cmake --build "$SBX_BUILD" -- -j"$(nproc)"
}

# The checkout may live anywhere (under /tmp, in a path with spaces: docs/testing.md, "Where a
# checkout may live"), but it must be writable (the build, reports) and allow exec (the build's
# binaries, the tool images and the ci/ scripts run from it). A checkout on a read-only or
# noexec mount stops here with the reason, exit 3, not half-way through the build.
sbx_check_location() {
  local probe
  if ! mkdir -p "$SBX_BUILD" 2>/dev/null || [[ ! -w $SBX_BUILD ]]; then
    echo "ci: cannot write the build directory $SBX_BUILD ($(findmnt -no TARGET,OPTIONS -T "$SBX_ROOT" 2>/dev/null || echo "mount unknown")): the checkout must be on a writable mount, or SBX_BUILD must name a writable place" >&2
    exit 3
  fi
  probe="$SBX_BUILD/.exec-probe-$$"
  printf '#!/bin/sh\nexit 0\n' >"$probe" && chmod +x "$probe"
  if ! "$probe" 2>/dev/null; then
    rm -f "$probe"
    echo "ci: cannot run programs from the build directory $SBX_BUILD (mount $(findmnt -no TARGET,OPTIONS -T "$SBX_BUILD" 2>/dev/null || echo unknown)): the build's binaries and tool images run from it; use a mount without noexec" >&2
    exit 3
  fi
  rm -f "$probe"
  if ! "$SBX_ROOT/ci/jail" --help >/dev/null 2>&1; then
    echo "ci: cannot run the checkout's own scripts ($SBX_ROOT/ci/jail; mount $(findmnt -no TARGET,OPTIONS -T "$SBX_ROOT" 2>/dev/null || echo unknown)): clone onto a mount without noexec" >&2
    exit 3
  fi
}

sbx_setup() {
  sbx_install_deps "$@"
  sbx_check_location
  sbx_build
}
