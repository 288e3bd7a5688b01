"""Shared by the benchmark scripts: rewrite one section of RESULTS.md and describe the machine."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

import torch

RESULTS = Path(__file__).with_name("RESULTS.md")


def machine_line() -> str:
    "The machine a figure was measured on: the CPU's model name, its cores, torch and its threads, Python."
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}."
    )


def write_section(name: str, markdown: str) -> None:
    """Replace the text between `<!-- BEGIN name -->` and `<!-- END name -->` in RESULTS.md."""
    text = RESULTS.read_text(encoding="utf-8")
    pattern = re.compile(rf"(<!-- BEGIN {re.escape(name)} -->\n)(.*?)(<!-- END {re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"RESULTS.md has no section {name!r}")
    text = pattern.sub(lambda m: m.group(1) + markdown.rstrip() + "\n" + m.group(3), text)
    tmp = RESULTS.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, RESULTS)
