"""environment.yml stays a thin wrapper around pyproject.toml, and stays consistent with it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pip_section(env: dict) -> list[str]:
    sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml needs exactly one pip section"
    return sections[0]


def test_environment_is_python_pip_and_the_project_only():
    env = _environment()
    plain = [d for d in env["dependencies"] if isinstance(d, str)]
    assert sorted(re.split(r"[=<>! ]", d)[0] for d in plain) == ["pip", "python"]
    pip = _pip_section(env)
    assert len(pip) == 1 and pip[0].startswith("-e ."), (
        f"the pip section should install the project only: {pip}"
    )


def test_python_pin_matches_requires_python():
    env = _environment()
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    requires = _pyproject()["project"]["requires-python"]
    assert python.replace(" ", "") == "python" + requires.replace(" ", ""), (python, requires)


def test_extras_named_in_environment_exist_in_pyproject():
    pip = _pip_section(_environment())[0]
    named = re.search(r"\[(.*)\]", pip).group(1).split(",")
    defined = _pyproject()["project"]["optional-dependencies"]
    assert set(named) <= set(defined), f"unknown extras {set(named) - set(defined)}"
    assert {"notebooks", "dev"} <= set(named)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def test_torch_range_admits_the_cpu_pin():
    torch_req = next(d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch"))
    lower = re.search(r">=\s*([\d.]+)", torch_req).group(1)
    upper = re.search(r"<\s*([\d.]+)", torch_req).group(1)
    version = (2, 13, 0)
    assert _version(lower) <= version < _version(upper), torch_req


def test_pip_resolves_the_environment_offline():
    pip = _pip_section(_environment())[0].replace("-e .", "-e " + str(ROOT))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-index",
            "--no-build-isolation",
            *pip.split(),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
