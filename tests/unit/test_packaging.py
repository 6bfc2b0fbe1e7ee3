"""The agent and the worker install without Spark (`pip install .`); the pipeline takes the `pipeline` extra.

Each check runs a fresh Python whose importer refuses pyspark, delta and py4j, as on an install without the
extra, whatever this environment has installed."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cdc.cli import PIPELINE_INSTALL, SPARK_MODULES

REPO = Path(__file__).resolve().parents[2]

_NO_SPARK = f"""
import sys

class _NoSpark:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {sorted(SPARK_MODULES)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NoSpark())
"""


def _run_without_spark(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _NO_SPARK + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _cdc_without_spark(*argv: str) -> subprocess.CompletedProcess[str]:
    return _run_without_spark(
        "from cdc.cli import main\n"
        f"try:\n    code = main({list(argv)!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
        "leaked = sorted(m for m in sys.modules if m.partition('.')[0] in ('pyspark', 'delta', 'py4j'))\n"
        "assert not leaked, leaked\n"
        "sys.exit(code)\n"
    )


def test_the_blocker_blocks_spark() -> None:
    done = _run_without_spark("import pyspark\n")
    assert done.returncode != 0
    assert "No module named 'pyspark'" in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("agent", "--help"),
        ("worker", "--help"),
        ("infra", "status", "--help"),
        ("infra", "up", "--help"),
        ("segment", "dump", "--help"),
        ("demo", "--help"),
        ("verify", "--help"),
        ("pipeline", "lake", "--help"),
    ],
)
def test_command_line_works_without_spark(argv: tuple[str, ...]) -> None:
    done = _cdc_without_spark(*argv)
    assert done.returncode == 0, done.stderr
    assert "usage: cdc" in done.stdout


@pytest.mark.parametrize("job", ["lake", "bootstrap", "replay", "reconcile"])
def test_pipeline_without_the_extra_fails_with_the_install_command(job: str, tmp_path: Path) -> None:
    done = _cdc_without_spark("pipeline", job, "--config", str(tmp_path / "cdc.yaml"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"install the pipeline extra: {PIPELINE_INSTALL}" in done.stderr
    assert done.stderr.startswith("cdc: error:")


def test_agent_worker_and_command_line_modules_import_without_spark() -> None:
    """Every module outside pipeline/ imports on an install without the extra (dynamic imports included)."""
    done = _run_without_spark(
        "import importlib, pkgutil\n"
        "failed = []\n"
        "for top in ('cdc', 'agents', 'app', 'consumers', 'schemas', 'state', 'cassandra_model', 'runtime', 'infra'):\n"
        "    package = importlib.import_module(top)\n"
        "    for info in pkgutil.walk_packages(package.__path__, top + '.'):\n"
        "        if info.name.endswith('__main__'):\n"
        "            continue\n"
        "        try:\n"
        "            importlib.import_module(info.name)\n"
        "        except ImportError as exc:\n"
        "            failed.append(f'{info.name}: {exc}')\n"
        "assert not failed, failed\n"
    )
    assert done.returncode == 0, done.stderr


def test_spark_is_only_in_the_pipeline_extra_and_make_installs_everything() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {
            r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
            for r in requirements
        }

    core = names(project["dependencies"])
    pipeline = names(project["optional-dependencies"]["pipeline"])
    assert {"pyspark", "delta-spark"} <= pipeline
    assert not core & {"pyspark", "delta-spark", "py4j"}
    assert {"faust-streaming", "aiokafka", "numpy"} <= core  # the worker's own needs stay in the core
    makefile = (REPO / "Makefile").read_text()
    assert "pip install --quiet -e '.[dev,pipeline]'" in makefile
    assert f"pip install '{project['name']}[pipeline]'" == PIPELINE_INSTALL
