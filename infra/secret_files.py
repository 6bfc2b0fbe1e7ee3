"""Files that hold secrets: generated passwords and configs that embed them, readable by their owner only.

A secret lives in exactly one kind of place, a 0600 file in a 0700 folder, so it never travels on a
command line (visible in /proc to every user) or in a log; errors name the file, never its content.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from infra.errors import SecurityMaterialError

#: 32 characters from [A-Za-z0-9_-]: strong, and safe inside JAAS quotes, CQL quotes and SCRAM specs
_PASSWORD_BYTES = 24


def private_folder(path: Path) -> Path:
    """Create `path` (and parents) and make sure only its owner can enter it."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> Path:
    """Write `text` atomically to a file created 0600 (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    staging.unlink(missing_ok=True)
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(staging, path)
    return path


def require_private(path: Path) -> Path:
    """Refuse a secret file that others may read: the secret may already have leaked."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SecurityMaterialError(f"secret file {path} is missing") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecurityMaterialError(
            f"secret file {path} is accessible to other users (mode {stat.S_IMODE(mode):o}); "
            f"run `chmod 600 {path}`, and regenerate the secret if others may have read it"
        )
    return path


def ensure_password(path: Path) -> Path:
    """The file holding a generated password: made once (0600), then reused as it is."""
    if path.exists():
        read_secret(path)
        return path
    private_folder(path.parent)
    return write_private(path, secrets.token_urlsafe(_PASSWORD_BYTES) + "\n")


def read_secret(path: Path) -> str:
    """The secret held by `path` (first line), after checking that only its owner can read the file."""
    require_private(path)
    value = path.read_text().strip()
    if not value:
        raise SecurityMaterialError(
            f"secret file {path} is empty; restore it, or delete it together with the service data it protects"
        )
    return value
