"""The installed distribution is one top-level package, ``reactq``, and shadows nobody.

Builds the wheel, installs it (without dependencies) into a fresh venv whose dependencies come
from this test's own environment, and imports it next to an application that has its own
``shared`` and ``workers`` packages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools reuses a stale build/ tree
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True)
    return next(out.glob("reactq-*.whl"))


def test_the_wheel_holds_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"reactq"}
    assert "reactq/shared/engine/loop.py" in names
    assert "reactq/workers/app.py" in names
    assert "reactq/dispatcher/cli/__init__.py" in names
    assert "reactq/dispatcher/local/samples/questions.jsonl" in names
    assert not [n for n in names if n.endswith(".pyc")]


def test_an_application_with_its_own_shared_and_workers_imports_both(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    target = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            check=True, capture_output=True, text=True).stdout.strip()
    with zipfile.ZipFile(wheel) as zf:  # a wheel is a zip: unpacking it is installing it
        zf.extractall(target)
    # reactq's dependencies come from this environment, appended after the venv's own paths.
    Path(target, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    app = tmp_path / "app"
    for pkg in ("shared", "workers", "dispatcher"):
        (app / pkg).mkdir(parents=True)
        (app / pkg / "__init__.py").write_text(f"OWNER = 'application {pkg}'\n")
    script = textwrap.dedent("""
        import shared, workers, dispatcher
        import reactq
        from reactq.workers.app import app as celery_app
        from reactq.shared.engine import loop
        assert shared.OWNER == "application shared", shared.__file__
        assert workers.OWNER == "application workers", workers.__file__
        assert dispatcher.OWNER == "application dispatcher", dispatcher.__file__
        assert reactq.__file__.startswith(%r), reactq.__file__
        assert callable(reactq.tool) and reactq.RunRequest(query="hi").query == "hi"
        assert celery_app.main == "reactq"
        print("ok")
    """ % target)
    res = subprocess.run([str(py), "-c", script], cwd=app, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]
