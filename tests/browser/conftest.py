"""The run viewer in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright, against real gateway processes, the session's real workers, a real
Redis-compatible server and the scripted LLM (the integration fixtures, imported here).

Skipped with a reason when Playwright or the Chromium binary is missing (``.ci/run``
installs both). Screenshots go to ``artifacts/screenshots/`` (git-ignored, kept by CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq.shared.redisconn import free_port
from tests.integration.conftest import (  # noqa: F401  (fixtures, re-exported for this folder)
    ROOT,
    LLMFixture,
    _histories_every_provider_accepts,
    backend,
    dispatcher,
    llm,
    r,
    redis_url,
    settings,
    worker_env,
    worker_factory,
    workers,
)

CHROMIUM = os.environ.get("REACTQ_CHROMIUM", "/usr/bin/chromium")
SHOTS = ROOT / "artifacts" / "screenshots"


class GatewayProc:
    """``uvicorn reactq.dispatcher.http:create_app`` in its own process, restartable on one port."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GatewayProc:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", "reactq.dispatcher.http:create_app",
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
               "--timeout-graceful-shutdown", "1"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx2.get(self.url + "/ui/", timeout=1)
                return self
            except httpx2.HTTPError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"gateway exited: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        raise RuntimeError("gateway did not start")

    def kill(self) -> None:
        """A hard stop (the network drop of a crash): no graceful close of open streams."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def api(self, token: str | None = None) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=10)


def _gateway(redis_url: str, llm: LLMFixture, tmp: Path, **extra: str) -> Iterator[GatewayProc]:
    env = worker_env(redis_url, llm, REACTQ_SSE_KEEPALIVE="1", **extra)
    gw = GatewayProc(env, tmp / "gateway.log").start()
    yield gw
    gw.kill()


@pytest.fixture(scope="session")
def gateway(redis_url: str, llm: LLMFixture, workers: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProc]:
    yield from _gateway(redis_url, llm, tmp_path_factory.mktemp("gw"),
                        REACTQ_FLOWER_URL="http://127.0.0.1:5555")


@pytest.fixture(scope="session")
def token_gateway(redis_url: str, llm: LLMFixture, workers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProc]:
    yield from _gateway(redis_url, llm, tmp_path_factory.mktemp("gwt"), REACTQ_API_TOKEN="s3cret-token")


# Module scope, not session: Playwright's sync API keeps an event loop running in this thread
# until ``stop()``, and every later test of the session that calls ``asyncio.run`` (or is an
# async test) would fail with "cannot be called from a running event loop".
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the `browser` extra (playwright)")
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium binary (apt-get install chromium; .ci/run does)")
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
                           args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.js_errors = errors
    yield pg
    ctx.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot under artifacts/screenshots/ (CI keeps the folder)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
