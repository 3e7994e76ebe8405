"""Installs reproduce the tested set: constraints.txt pins every package the project's
dependencies (every extra) resolve to, and an environment installed with it holds exactly
those versions. ``make test-latest`` runs the suite on today's releases instead and sets
REACTQ_TEST_LATEST, where only the lock's own completeness is checked."""

from __future__ import annotations

import os
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    """The pins that apply to this interpreter and platform."""
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, _, version = spec.strip().partition("==")
        assert version, f"constraints.txt: {line!r} is not an exact pin"
        pins[_norm(name)] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def test_every_declared_dependency_of_every_extra_is_pinned() -> None:
    pins = _pins()
    missing = [str(r) for r in _declared() if (r.marker is None or r.marker.evaluate()) and _norm(r.name) not in pins]
    assert not missing, f"not in constraints.txt (run `make lock`): {missing}"


def test_the_pins_satisfy_the_declared_ranges() -> None:
    pins = _pins()
    bad = [f"{r} (pinned {pins[_norm(r.name)]})" for r in _declared()
           if _norm(r.name) in pins and not r.specifier.contains(pins[_norm(r.name)], prereleases=True)]
    assert not bad, bad


@pytest.mark.skipif(bool(os.environ.get("REACTQ_TEST_LATEST")), reason="make test-latest: today's releases")
def test_the_installed_versions_are_the_pinned_ones() -> None:
    pins = _pins()
    drift = {}
    for dist in metadata.distributions():
        name = _norm(dist.metadata["Name"])
        if name in pins and name not in {"pip", "setuptools", "wheel"} and dist.version != pins[name]:
            drift[name] = (dist.version, pins[name])
    assert not drift, f"installed (version, pinned): {drift}; install with -c constraints.txt"
