"""Cold set-up and warm start times of the local services.

Cold: empty jar cache and empty Maven repository (everything downloaded from Maven Central), optionally a
fresh virtualenv with `pip install --no-cache-dir`; then first start of Kafka (storage format included)
and of a three-node cluster. Warm: stop everything and start it again on the same data.

    .venv/bin/python bench/infra_startup.py [--with-pip] [--out bench/infra_startup.md]

Uses its own ports' home folder under a temporary directory; stop `cdc infra` services first.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.artifacts import ensure_cassandra, ensure_kafka  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from infra.stack import LocalStack  # noqa: E402


def timed(fn) -> float:
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-pip", action="store_true", help="also time a cold pip install of the project")
    parser.add_argument("--out", type=Path, help="write a Markdown report here")
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp:
        base = Path(tmp)
        if args.with_pip:
            venv = base / "venv"
            rows.append(("venv + pip install (no pip cache)", timed(lambda: _pip_install(venv))))
        os.environ["MAVEN_OPTS"] = f"-Dmaven.repo.local={base / 'm2'}"
        settings = InfraSettings.from_env(home=base / "home", cache=base / "cache")
        rows.append(("download Cassandra jars (empty Maven repo)", timed(lambda: ensure_cassandra(settings))))
        rows.append(("download Kafka jars", timed(lambda: ensure_kafka(settings))))
        stack = LocalStack(settings)
        try:
            first = stack.up(nodes=3)
            rows += [(f"first start: {name}", took or 0.0) for name, took in first.items()]
            stack.down(report=lambda _m: None)
            warm = stack.up(nodes=3)
            rows += [(f"warm start: {name}", took or 0.0) for name, took in warm.items()]
        finally:
            stack.down(report=lambda _m: None)
    report = _markdown(rows)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


def _pip_install(venv: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-cache-dir", "-e", f"{REPO}[dev]"], check=True
    )


def _markdown(rows: list[tuple[str, float]]) -> str:
    lines = [
        "# Local services: cold set-up and warm start",
        "",
        "Command: `.venv/bin/python bench/infra_startup.py --with-pip --out bench/infra_startup.md`",
        f"Machine: {os.cpu_count()} cores; measured {time.strftime('%Y-%m-%d')}.",
        "",
        "| step | seconds |",
        "|---|---:|",
        *(f"| {name} | {secs:.1f} |" for name, secs in rows),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
