"""Where the offline test collections live."""

from __future__ import annotations

import os
from pathlib import Path

from pyserini_moe.errors import UserError

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``$PYSERINI_MOE_DATA``, else the first ``shared/data`` beside the checkout or the cwd.

    A variable naming a file is refused: ignored, it let ``scifact`` resolve to a download or to
    another folder without a word."""
    env = os.environ.get("PYSERINI_MOE_DATA")
    if env:
        if Path(env).exists() and not Path(env).is_dir():
            raise UserError(f"PYSERINI_MOE_DATA={env} is a file, not a folder: point it at the "
                            "folder that holds the collections")
        return Path(env) if Path(env).is_dir() else None
    for base in (_PACKAGE_ROOT, Path.cwd()):
        candidate = base.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None
