"""The project's code as one zip for the executors of a cluster, so their tasks run the driver's code.

A job's tasks unpickle functions of ``pipeline``, ``schemas``, ``state``, ``cassandra_model`` and
``runtime``: on ``local[N]`` they import them from the driver's own installation, but a cluster's
executors may have another version of the package installed, or none. The zip holds the packages the
driver imports them from, exactly as they are (data files such as the Avro schemas included); Spark sends
it to every executor (``SparkContext.addPyFile``), which puts it first on the Python path of its tasks.
The third-party libraries they use (cassandra-driver, fastavro, cavro, ...) must be installed on the
executors (README, "Running the pipeline on a Spark cluster").
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import shutil
import tempfile
import zipfile
from functools import cache
from pathlib import Path

#: every package a task may import (the pipeline's own modules import the others)
PACKAGES = ("pipeline", "runtime", "schemas", "state", "cassandra_model", "infra")


def _package_files(name: str) -> list[tuple[Path, str]]:
    """(file, name in the zip) of one package's files, compiled files left out."""
    module = importlib.import_module(name)
    assert module.__file__ is not None
    folder = Path(module.__file__).resolve().parent
    root = folder.parent
    return [
        (path, path.relative_to(root).as_posix())
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    ]


@cache
def executor_code_zip() -> Path:
    """The zip of ``PACKAGES`` as the driver has them (made once per process, removed at its exit). Its
    name carries a hash of the content, so an executor's log shows which code it ran."""
    files = [item for name in PACKAGES for item in _package_files(name)]
    digest = hashlib.sha256()
    for path, arcname in files:
        digest.update(arcname.encode() + b"\0" + path.read_bytes())
    folder = Path(tempfile.mkdtemp(prefix="cdc-executor-code-"))
    atexit.register(shutil.rmtree, folder, True)
    target = folder / f"cassandra_cdc-{digest.hexdigest()[:12]}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, arcname in files:
            archive.write(path, arcname)
    return target
