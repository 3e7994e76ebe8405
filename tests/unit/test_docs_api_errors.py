"""docs/api-errors.md: its example request gets exactly the answer the page shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

from reactq.dispatcher.http import create_app
from reactq.shared.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "api-errors.md"


def _block(title: str) -> str:
    m = re.search(rf'^```\w+ title="{title}"\n(.*?)^```', DOC.read_text(), re.M | re.S)
    assert m, title
    return m.group(1)


def test_the_example_error_is_what_the_gateway_answers() -> None:
    method_path, body = _block("request").split("\n", 1)
    method, path = method_path.split()
    # Validation happens before Redis is touched: a gateway whose Redis is down answers it.
    with TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1/0"))) as client:
        res = client.request(method, path, content=body.strip(), headers={"content-type": "application/json"})
    assert res.status_code == 422
    assert res.json() == json.loads(_block("422"))
