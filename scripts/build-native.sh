#!/usr/bin/env bash
# Build the native core (native/, a Rust crate built by maturin) into the virtualenv of $PIP.
# The agent runs without it, on the slower Python core (which its log, /health and /metrics say), so a
# machine with no Rust toolchain gets a warning, not a failure. scripts/install-system-deps.sh installs
# Debian's rustc and cargo when none is there (bookworm: 1.63 / cargo 0.66); native/Cargo.lock pins crate
# versions that build with them.
set -euo pipefail
cd "$(dirname "$0")/.."
pip="${PIP:-.venv/bin/pip}"

cargo_bin="$(command -v cargo || true)"
if [ -z "$cargo_bin" ] && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
  cargo_bin="$HOME/.cargo/bin/cargo"
fi
if [ -z "$cargo_bin" ] || ! command -v rustc >/dev/null 2>&1; then
  echo "warning: no Rust toolchain (cargo, rustc): the agent will run on the Python core, about ten times" \
       "slower per event; run scripts/install-system-deps.sh as root (Debian's rustc and cargo) and" \
       "make setup again to build the native core" >&2
  exit 0
fi
cargo_minor="$(cargo --version | sed -n 's/^cargo 1\.\([0-9]*\).*/\1/p')"
if [ -n "$cargo_minor" ] && [ "$cargo_minor" -lt 68 ]; then
  # Before 1.68 cargo reads crates.io's index through git; the sparse (HTTP) index is an unstable
  # option of these versions, enabled here as Debian's cargo allows.
  export RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_SPARSE_REGISTRY=true
fi
echo "building the native core with $(rustc --version)"
"$pip" install --quiet ./native
