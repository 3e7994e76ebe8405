"""The reference pages are generated from the code and miss nothing: every setting of every
settings class, every environment variable the shipped code reads, every HTTP route, every
command, every event channel, every model-registry key."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from docs.gen import ref_config, ref_events, ref_http, ref_registry
from docs.gen.pages import generate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def configuration() -> str:
    return ref_config.render()


def test_every_setting_of_every_settings_class_is_in_the_configuration_reference(configuration: str) -> None:
    classes = ref_config.settings_classes()
    assert {c.__name__ for c in classes} >= {"Settings", "EngineConfig", "DagConfig"}
    for cls in classes:
        for name in cls.model_fields:
            current, old = ref_config.env_names(cls, name)
            for env in current + old:
                assert f"`{env}`" in configuration, f"{cls.__name__}.{name} ({env}) is not in the reference"


def test_every_environment_variable_read_by_shipped_code_is_in_the_configuration_reference(
        configuration: str) -> None:
    reads, _ = ref_config.environment_reads()
    assert "XDG_DATA_HOME" in reads  # the scan works (read in shared/settings.py)
    missing = [name for name in reads if f"`{name}`" not in configuration]
    assert not missing


def test_a_read_the_reference_does_not_know_fails_the_generation(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "shared"
    pkg.mkdir()
    (pkg / "new.py").write_text("import os\nX = os.environ.get('REACTQ_SOMETHING_NEW')\n")
    monkeypatch.setattr(ref_config, "ROOT", tmp_path)
    reads, _ = ref_config.environment_reads()
    assert reads == {"REACTQ_SOMETHING_NEW": ["shared/new.py"]}
    with pytest.raises(ValueError, match="REACTQ_SOMETHING_NEW"):
        ref_config.render()


def test_every_route_of_the_gateway_is_in_the_http_reference() -> None:
    page = ref_http.render()
    doc = ref_http.openapi()
    for path, item in doc["paths"].items():
        for method in item:
            if method in ref_http.METHODS:
                assert f"`{method.upper()} {path}`" in page


def test_every_event_channel_is_in_the_events_reference() -> None:
    from reactq.shared.events import CHANNELS

    page = ref_events.render()
    for channel in CHANNELS:
        assert f"## `{channel}`" in page


def test_every_registry_key_is_in_the_model_registry_reference() -> None:
    from reactq.shared.llm.registry import Abilities, ModelEntry

    page = ref_registry.render()
    for name in [*ModelEntry.model_fields, *Abilities.model_fields]:
        assert f"| `{name}` |" in page


def test_the_generated_pages_are_the_ones_the_nav_names() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in generate():
        if path.endswith(".md"):
            assert path in nav


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                    reason="the `docs` extra is not installed (make docs installs it)")
def test_the_site_builds_strict(tmp_path: Path) -> None:
    res = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "-q",
                          "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").exists()
