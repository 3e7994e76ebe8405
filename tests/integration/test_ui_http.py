"""/ui is served by the gateway from the installed package; with a token, the page loads
(it holds no data) and everything it reads needs the token."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from fastapi.testclient import TestClient

from reactq.dispatcher.http import ui as ui_http
from reactq.dispatcher.http import create_app
from reactq.shared.settings import Settings

pytestmark = pytest.mark.integration


def test_every_shipped_file_is_served_and_the_page_loads_them_all(redis_url):
    pkg = resources.files("reactq.dispatcher.ui")
    with TestClient(create_app(Settings(redis_url=redis_url))) as c:
        assert c.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        page = c.get("/ui/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        linked = set(re.findall(r'(?:src|href)="/ui/([\w.]+)"', page.text))
        assert linked == set(ui_http._FILES) - {"index.html"}
        for name in ui_http._FILES:
            res = c.get(f"/ui/{name}")
            assert res.status_code == 200 and res.content == pkg.joinpath(name).read_bytes()
        assert c.get("/ui/../http.py").status_code == 404
        assert c.get("/ui/secrets.txt").status_code == 404
        assert c.get("/v1/ui/config").json() == {"flower_url": None, "auth": False}


def test_with_a_token_the_page_is_open_and_its_data_is_not(redis_url):
    app = create_app(Settings(redis_url=redis_url, api_token="tok"))
    with TestClient(app) as c:
        assert c.get("/ui/").status_code == 200
        assert c.get("/ui/app.js").status_code == 200
        assert c.get("/v1/ui/config").status_code == 401
        assert c.get("/v1/runs").status_code == 401
        assert c.get("/uix").status_code == 401  # only /ui and /ui/… are open
        ok = c.get("/v1/runs", headers={"Authorization": "Bearer tok"})
        assert ok.status_code == 200 and "runs" in ok.json()
        assert c.get("/v1/ui/config", headers={"Authorization": "Bearer tok"}).json()["auth"] is True
