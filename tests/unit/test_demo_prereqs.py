"""`make demo` checks what it needs before it starts, and says how long the first run takes."""

from __future__ import annotations

from reactq.dispatcher.local.demo import prerequisites


def _which(*present: str):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_an_old_python_stops_the_demo_with_the_version_it_needs():
    problems, _ = prerequisites(needs_local_build=False, version=(3, 10), in_venv=True, which=_which())
    assert problems == ["Python 3.11 or newer is needed (this is 3.10)"]


def test_building_the_local_model_without_a_compiler_stops_the_demo_and_says_what_to_install():
    problems, _ = prerequisites(needs_local_build=True, version=(3, 11), in_venv=True, which=_which("cc"))
    assert len(problems) == 1 and "C and C++ compiler" in problems[0] and "OPENAI_API_KEY" in problems[0]


def test_with_a_compiler_the_demo_says_the_build_takes_about_seven_minutes_once():
    problems, notes = prerequisites(needs_local_build=True, version=(3, 12), in_venv=True,
                                    which=_which("gcc", "g++"))
    assert problems == [] and any("7 minutes" in n and "once" in n for n in notes)


def test_a_hosted_model_needs_no_compiler_and_outside_a_venv_the_demo_says_so():
    problems, notes = prerequisites(needs_local_build=False, version=(3, 11), in_venv=False, which=_which())
    assert problems == [] and notes == ["not in a virtual environment: `make demo` makes one (.venv)"]
