#!/usr/bin/env bash
# Make sure the machine has what the Python project cannot pip-install: Python >= 3.11 with venv,
# a JDK 17 (Cassandra 5.0, Kafka, Spark), Maven (downloads the service jars from Maven Central) and the
# PostgreSQL server (the Kafka Connect sink tests), and a Rust toolchain for the agent's native core (built by
# scripts/build-native.sh; without one the agent runs on its slower Python core).
# Installs missing pieces from Debian packages when run as root; otherwise says what to install.
set -euo pipefail

missing=()
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  missing+=(python3 python3-venv)
fi
java_major=""
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; else java_bin="$(command -v java || true)"; fi
if [ -n "$java_bin" ]; then
  java_major="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
fi
[ "$java_major" = "17" ] || missing+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# PostgreSQL server binaries (initdb, pg_ctl): the database the Kafka Connect JDBC sink tests write into
# (infra/postgres.py looks on PATH and in /usr/lib/postgresql/*/bin, where Debian puts them).
if ! command -v initdb >/dev/null 2>&1 && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi

# Rust: any rustc >= 1.63 with cargo (rustup's in ~/.cargo/bin counts); else Debian's rustc and cargo.
rustc_bin="$(command -v rustc || true)"
[ -n "$rustc_bin" ] || [ ! -x "$HOME/.cargo/bin/rustc" ] || rustc_bin="$HOME/.cargo/bin/rustc"
rust_minor=""
if [ -n "$rustc_bin" ]; then
  rust_minor="$("$rustc_bin" --version 2>/dev/null | sed -n 's/^rustc 1\.\([0-9]*\).*/\1/p')"
fi
if [ -z "$rust_minor" ] || [ "$rust_minor" -lt 63 ] || ! { command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ]; }; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    missing+=(rustc cargo)
  else
    echo "note: no Rust toolchain (rustc >= 1.63 and cargo): the agent will run on its slower Python core" >&2
  fi
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  if [ "$java_major" != "17" ] && [ -d /usr/lib/jvm/java-17-openjdk-amd64 ]; then
    echo "note: Java 17 installed at /usr/lib/jvm/java-17-openjdk-amd64; set JAVA_HOME to it if another Java comes first on PATH"
  fi
else
  echo "missing: ${missing[*]}; install them (e.g. apt-get install ${missing[*]}) and run again" >&2
  exit 1
fi
