"""Where the offline test collections live."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``$PYSERINI_MOE_DATA``, else the first ``shared/data`` beside the checkout or the cwd."""
    env = os.environ.get("PYSERINI_MOE_DATA")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for base in (_PACKAGE_ROOT, Path.cwd()):
        candidate = base.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None
