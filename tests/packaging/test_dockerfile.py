"""The image builds: a wheel built from exactly the files ``deploy/Dockerfile`` copies installs
and its entry point starts.

No Docker engine is needed: the Dockerfile's ``COPY`` lines (those from the build context) are
parsed, their sources copied into an empty folder as the build would see them (minus what
``.dockerignore`` leaves out), the wheel built there with ``pip wheel`` as the image's build
stage does, installed into a fresh venv (dependencies from this test's environment), and
``reactq --version`` run from that venv's ``bin``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

pytestmark = pytest.mark.timeout(300)


def _instructions(text: str) -> list[list[str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    logical, out = "", []
    for line in text.splitlines():
        if line.lstrip().startswith("#") and not logical:
            continue
        logical += line.rstrip()
        if logical.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        if logical.strip():
            out.append(shlex.split(logical))
        logical = ""
    return out


def context_copies(text: str) -> list[str]:
    """The sources of every ``COPY`` that reads the build context (not ``--from=`` a stage)."""
    sources: list[str] = []
    for words in _instructions(text):
        if words[0].upper() != "COPY":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue
        sources += args[:-1]
    return sources


def _ignored() -> Callable[[str, list[str]], set[str]]:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    names = {p.removeprefix("**/") for p in patterns}
    return shutil.ignore_patterns(*names)


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context holding only what the Dockerfile copies."""
    ctx = tmp_path_factory.mktemp("context")
    for src in context_copies(DOCKERFILE.read_text()):
        path = ROOT / src
        assert path.exists(), f"deploy/Dockerfile copies {src}, which is not in the repository"
        if path.is_dir():
            shutil.copytree(path, ctx / src, ignore=_ignored())
        else:
            shutil.copy2(path, ctx / src)
    return ctx


def test_the_dockerfile_copies_what_the_package_is_made_of() -> None:
    sources = set(context_copies(DOCKERFILE.read_text()))
    assert {"pyproject.toml", "setup.py", "README.md", "LICENSE", "reactq", "shared", "workers",
            "dispatcher", "constraints.txt"} <= sources


def test_the_image_installs_the_locked_versions() -> None:
    installs = [words for words in _instructions(DOCKERFILE.read_text())
                if words[0] == "RUN" and "install" in words and "pip" in words]
    assert installs and all("-c" in words for words in installs), installs


def test_the_copied_files_build_a_wheel_whose_command_starts(context: Path, tmp_path: Path) -> None:
    out = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(context)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheel = next(out.glob("reactq-*.whl"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    target = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    # reactq's dependencies come from this environment, after the venv's own paths.
    Path(target, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([str(env_dir / "bin" / "reactq"), "--version"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == f"reactq {version('reactq')}"
    res = subprocess.run([str(env_dir / "bin" / "reactq"), "serve", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--port" in res.stdout, res.stderr[-3000:]


def test_building_the_package_prints_no_setuptools_warnings(context: Path, tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path),
                            str(context)], capture_output=True, text=True)
    assert build.returncode == 0
    assert "BuildBackendWarning" not in build.stdout + build.stderr
    assert "absent from the `packages` configuration" not in build.stdout + build.stderr
