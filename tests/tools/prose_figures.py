"""Figures the prose of a notebook quotes that its stored outputs do not show.

    python tests/tools/prose_figures.py notebooks/0*.ipynb

A lesson's committed outputs come from a full-size run; its prose must not quote a figure those outputs
contradict. This tool reads every markdown cell, finds the figures that depend on the run or the machine:

- losses: `4.65 nats`, `nats/token`, `nats per token`, `1.98 bits/byte`, `bits per byte`;
- times: `510 s`, `42 ms`, `8.5 minutes`, `2 h`;
- rates: `10,600 tokens/s`, `tok/s`, `2.7 batches/s`, `steps/s`, `MB/s`, `GFLOP/s`;
- speed-ups: `1.9×`, `2.2x faster`;

and looks for each in the stored outputs of the same notebook (stream text, text/plain and text/html): a
number that, converted to the prose's unit where the output names one (`510 s` is `8.5 minutes`) and
rounded to as many decimals as the prose gives, equals it. A loss may be printed without its unit (in a
table); a time, a rate or a speed-up must carry its unit in the output. How long an exercise or a read
takes the learner is not a measurement and is not checked. A figure is also exempt when its sentence gives
a *range* (`3-6 minutes`, `between 3 and 6 minutes`) and names the machine it was measured on, when its
sentence cites `benchmarks/RESULTS.md` (the figure must then be in that file), or when its markdown cell
says why in a comment `<!-- figures: REASON -->` (a paper's figure, a datasheet's). Prints one line per
unbacked figure.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
UNITS = {  # unit spelling -> (family, factor to the family's base unit)
    "nats/token": ("loss", 1.0),
    "nats per token": ("loss", 1.0),
    "nats": ("loss", 1.0),
    "bits/byte": ("bpb", 1.0),
    "bits per byte": ("bpb", 1.0),
    "ms": ("time", 1e-3),
    "µs": ("time", 1e-6),
    "seconds": ("time", 1.0),
    "second": ("time", 1.0),
    "s": ("time", 1.0),
    "minutes": ("time", 60.0),
    "minute": ("time", 60.0),
    "min": ("time", 60.0),
    "hours": ("time", 3600.0),
    "hour": ("time", 3600.0),
    "h": ("time", 3600.0),
    "tokens/s": ("tok/s", 1.0),
    "tok/s": ("tok/s", 1.0),
    "batches/s": ("batch/s", 1.0),
    "steps/s": ("step/s", 1.0),
    "step/s": ("step/s", 1.0),
    "MB/s": ("MB/s", 1.0),
    "GFLOP/s": ("FLOP/s", 1e9),
    "TFLOP/s": ("FLOP/s", 1e12),
    "×": ("speedup", 1.0),
    "x": ("speedup", 1.0),
}
_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
FIGURE = re.compile(rf"(?<![\w.,/]){NUMBER}[ \u00a0\u202f]?({_UNIT})(?![\w/])")
ANY_NUMBER = re.compile(rf"(?<![\w.]){NUMBER}")
RANGE = re.compile(rf"{NUMBER}\s*(?:-|–|to|and)\s*{NUMBER}[ \u00a0]?({_UNIT})(?![\w/])")
MACHINE = re.compile(r"CPU|GPU|core|Xeon|EPYC|AMD|Intel|laptop|H100|H200|A100|T4|machine", re.I)
EXEMPT = re.compile(r"<!--\s*figures:[^>]+-->")
LEARNER_TIME = re.compile(r"exercise|reading|to read|to write|workbook", re.I)
BARE_FAMILIES = ("loss", "bpb")


def _value(whole: str, frac: str | None) -> float:
    return float(whole.replace(",", "") + (f".{frac}" if frac else ""))


def prose_of(cell: dict) -> str:
    "A markdown cell's text without code, links' targets and HTML tags (figures there are not prose)."
    text = "".join(cell["source"])
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = re.sub(r"\$[^$]*\$", " ", text)
    return re.sub(r"<[^>]+>", " ", text)


def outputs_of(nb: dict) -> str:
    parts = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            if "text" in output:
                parts.append("".join(output["text"]))
            data = output.get("data", {})
            for kind in ("text/plain", "text/html", "text/markdown"):
                if kind in data:
                    parts.append(html.unescape(re.sub(r"<[^>]+>", " ", "".join(data[kind]))))
    return "\n".join(parts)


def candidates(outputs: str) -> dict[str, list[float]]:
    "The numbers of the outputs: those with a unit in their family's base unit, and every bare number."
    found: dict[str, list[float]] = {"bare": []}
    for match in FIGURE.finditer(outputs):
        family, factor = UNITS[match.group(3)]
        found.setdefault(family, []).append(_value(match.group(1), match.group(2)) * factor)
    found["bare"] = [_value(m.group(1), m.group(2)) for m in ANY_NUMBER.finditer(outputs)]
    return found


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?;:])\s+(?=[A-Z(])|\n\s*\n", text)


def unbacked(notebook: Path) -> list[str]:
    "One line per figure of the prose of `notebook` that its stored outputs do not show."
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    found = candidates(outputs_of(nb))
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    problems = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown" or EXEMPT.search("".join(cell["source"])):
            continue
        for sentence in _sentences(prose_of(cell)):
            ranged = RANGE.search(sentence) is not None and MACHINE.search(sentence) is not None
            for match in FIGURE.finditer(sentence):
                dimension = match.group(3) in "×x" and sentence[match.end() :].lstrip()[:1].isdigit()
                if ranged or dimension or _backed(match, found, sentence, results):
                    continue
                where = " ".join(sentence.split())[:100]
                problems.append(
                    f"{notebook.name} [{index}]: {match.group(0)!r} is in no stored output: {where}"
                )
    return problems


def _backed(match: re.Match, found: dict, sentence: str, results: str) -> bool:
    value, decimals = _value(match.group(1), match.group(2)), len(match.group(2) or "")
    family, factor = UNITS[match.group(3)]
    if "RESULTS.md" in sentence or "benchmarks/" in sentence:
        return bool(re.search(rf"(?<![\d.]){re.escape(match.group(1))}(\.{match.group(2) or ''})?", results))
    if family == "time" and LEARNER_TIME.search(sentence):
        return True  # how long an exercise or a read takes the learner: not a measurement
    pool = [v / factor for v in found.get(family, [])]
    if family in BARE_FAMILIES:  # losses and ratios are often printed in tables, without a unit each
        pool += found["bare"]
    return any(round(v, decimals) == value for v in pool)


if __name__ == "__main__":
    lines = [line for path in sys.argv[1:] for line in unbacked(Path(path))]
    print("\n".join(lines) if lines else "every figure of the prose is in the stored outputs")
    raise SystemExit(1 if lines else 0)
