"""Find Java 17 and Maven, or say exactly what is missing and how to install it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infra.errors import ToolchainError

REQUIRED_JAVA_MAJOR = 17
_INSTALL_HINT = "install it with `apt-get install openjdk-17-jdk-headless` or point JAVA_HOME at a JDK 17"


@dataclass(slots=True, frozen=True)
class Java:
    executable: Path
    major: int
    version: str


def parse_java_version(text: str) -> tuple[int, str]:
    """Read the version out of `java -version` output ('1.8.0_x' means 8, '17.0.15' means 17)."""
    match = re.search(r'version "([^"]+)"', text)
    if not match:
        raise ToolchainError(
            f"cannot read a Java version from `java -version` output: {text.strip()[:200]!r}"
        )
    version = match.group(1)
    parts = version.split(".")
    major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(re.match(r"\d+", parts[0]).group())
    return major, version


def find_java() -> Java:
    """The JDK named by JAVA_HOME, else the first `java` on PATH; it must be Java 17."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if not candidate.is_file():
            raise ToolchainError(f"JAVA_HOME={java_home} has no bin/java; {_INSTALL_HINT}")
    else:
        found = shutil.which("java")
        if not found:
            raise ToolchainError(f"Java not found on PATH; {_INSTALL_HINT}")
        candidate = Path(found)
    try:
        out = subprocess.run([str(candidate), "-version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise ToolchainError(f"cannot run {candidate}: {exc}; {_INSTALL_HINT}") from exc
    major, version = parse_java_version(out.stderr + out.stdout)
    if major != REQUIRED_JAVA_MAJOR:
        raise ToolchainError(
            f"{candidate} is Java {version}; Cassandra 5.0 and Spark 4 here need Java {REQUIRED_JAVA_MAJOR}: "
            f"{_INSTALL_HINT}"
        )
    return Java(executable=candidate, major=major, version=version)


def find_maven() -> Path:
    found = shutil.which("mvn")
    if not found:
        raise ToolchainError("Maven (`mvn`) not found on PATH; install it with `apt-get install maven`")
    return Path(found)
