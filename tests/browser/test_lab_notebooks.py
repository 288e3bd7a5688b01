"""The learner's path, checked in a real browser: every notebook opened in JupyterLab, all its cells run
(smoke mode) from Lab's own "Run All Cells" command, and what the page shows checked afterwards.

- every notebook: every code cell ran, no error output in the notebook, no traceback or broken widget
  drawn on the page; a screenshot of it (see conftest.py for where it goes);
- 01_bpe: the tokenizer widget renders, and typing into its text box changes what it shows;
- 06_training: the live figure changes while the training cell runs (the page draws at least three
  different pictures of it before the cell ends), and the final sample appears under its
  `=== sample ... ===` header;
- every lesson's exercises: the check after each says its reference passed; every workbook, opened as
  the learner first opens it and run whole, completes, each check saying "not done yet" (and where the
  answer is), not an error;
- the committed outputs, opened without running anything (as a reader on GitHub sees them): 01's token
  colouring as plain HTML and 06's figure of the full-size `cpu` run; the README's screenshots are these.
"""

from __future__ import annotations

import io
import json
import re
import sys
import time
import warnings
from pathlib import Path

import pytest
from lab_harness import REPO, HarnessError, LabPage, error_outputs, notebook_names, notebooks_folder
from PIL import Image, ImageChops

pytestmark = pytest.mark.browser

RUN_TIMEOUT_S = 240  # one notebook in smoke mode takes well under a minute; leave room on a busy machine
MAX_SCREENSHOT_BYTES = 300_000

TOKEN_INPUT = "document.querySelector('.gptlib-token-input input, input.gptlib-token-input')"
TOKEN_OUTPUT = "document.querySelector('.gptlib-token-output')"
SAMPLE_HEADER = re.compile(r"^=== sample\b.*===$", re.M)  # e.g. "=== sample (step 60, val loss 5.1) ==="
# Notebooks with hooks of their own; every notebook found is checked in any case.
HOOKED = ("01_bpe", "06_training")


def expected_errors(cell: dict) -> bool:
    """Cells that are meant to raise (nbval's marker or Lab's tag), e.g. showing a learner's error."""
    return "raises-exception" in cell["tags"] or cell["source"].lstrip().startswith(
        "# NBVAL_RAISES_EXCEPTION"
    )


def assert_ran_cleanly(lab: LabPage, name: str) -> None:
    run = lab.run_state()
    cells = lab.cells()
    unexpected = [cell for cell in cells if not expected_errors(cell)]
    errors = error_outputs(unexpected)
    assert not errors, f"{name}: error outputs after Run All:\n" + "\n".join(errors)
    drawn = lab.drawn_errors()
    assert not drawn, f"{name}: the page shows a traceback or a broken widget:\n" + "\n---\n".join(drawn)
    not_run = [
        c["index"] for c in cells if c["type"] == "code" and c["source"].strip() and c["count"] is None
    ]
    assert not not_run, f"{name}: code cells {not_run} never ran"
    assert run["error"] is None and run["ok"], f"{name}: Run All did not complete: {run}"
    timed = sorted((c for c in cells if c.get("seconds") is not None), key=lambda c: -c["seconds"])
    total = (run["finished"] - run["started"]) / 1000
    slowest = ", ".join(f"cell {c['index']} {c['seconds']:.1f} s" for c in timed[:3])
    print(f"{name}: Run All took {total:.1f} s in the browser; slowest: {slowest}")


def save_screenshot(lab: LabPage, path: Path) -> None:
    time.sleep(0.3)  # let the last scroll settle
    save_png(lab.page.screenshot(), path)


def close_quietly(lab: LabPage, name: str) -> None:
    "Close the notebook; a cleanup error is a warning, never hiding the test's own failure."
    try:
        lab.close_notebook()
    except Exception as exc:
        warnings.warn(f"could not close {name} cleanly: {exc}", stacklevel=2)


def save_png(png: bytes, path: Path) -> None:
    """Write a screenshot, reduced to a 256-colour palette when it would be too large for the docs."""
    path.write_bytes(png)
    if path.stat().st_size > MAX_SCREENSHOT_BYTES:
        image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256)
        image.save(path, optimize=True)
    assert path.stat().st_size < MAX_SCREENSHOT_BYTES, f"{path} is {path.stat().st_size} bytes"


def images_differ(a: bytes, b: bytes) -> bool:
    first, second = Image.open(io.BytesIO(a)).convert("RGB"), Image.open(io.BytesIO(b)).convert("RGB")
    return first.size != second.size or ImageChops.difference(first, second).getbbox() is not None


def check_token_widget(lab: LabPage) -> None:
    """The tokenizer widget renders and answers typed text, as a learner would type it: the output
    shows the typed text cut into tokens (one span each) and says how many tokens there are."""
    page = lab.page
    for selector, what in ((TOKEN_INPUT, "a text input"), (TOKEN_OUTPUT, "an output")):
        try:  # widgets render asynchronously after their cell has run
            page.wait_for(f"!!{selector}", timeout=20, what=what)
        except HarnessError:
            pytest.fail(f"01_bpe: no {what} of the token widget is drawn ({selector})")
    initial = page.evaluate(f"[{TOKEN_INPUT}.value, {TOKEN_OUTPUT}.textContent]")
    assert initial[0] in initial[1], f"01_bpe: the token widget does not show its initial text {initial[0]!r}"
    shown = []
    for text in ("Romeo and Juliet", "To be, or not to be: that is the question."):
        before = page.evaluate(f"{TOKEN_OUTPUT}.textContent")
        box = lab.element_rect(TOKEN_INPUT)
        page.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.evaluate(f"{TOKEN_INPUT}.select()")  # typing replaces what the box holds
        page.insert_text(text)
        assert page.evaluate(f"{TOKEN_INPUT}.value") == text, "01_bpe: the token input did not take the text"
        try:
            answered = f"const t = {TOKEN_OUTPUT}.textContent; return t !== {json.dumps(before)} && t;"
            after = page.wait_for(
                f"(() => {{ {answered} }})()",
                timeout=30,
                what="the token widget to answer",
            )
        except HarnessError:
            pytest.fail(f"01_bpe: typing {text!r} into the token widget changed nothing it shows within 30 s")
        assert text in after, (
            f"01_bpe: the token widget does not show the typed text {text!r}: {after[:300]!r}"
        )
        count = re.search(r"(\d+) tokens", after)
        assert count, f"01_bpe: the token widget does not say how many tokens {text!r} has: {after[:300]!r}"
        spans = page.evaluate(f"{TOKEN_OUTPUT}.querySelectorAll('span[title]').length")
        assert spans == int(count.group(1)), (
            f"01_bpe: {spans} token spans drawn, but the widget says {count.group(0)}"
        )
        shown.append(after)
    assert shown[0] != shown[1], "01_bpe: the token widget shows the same thing for two different texts"


MIN_LIVE_FRAMES = 3  # the first drawing, at least one redraw during training, the last


def live_figure(lab: LabPage) -> tuple[int, list[bytes]] | str:
    """The cell whose figure the page redrew most often while that cell ran, and the distinct pictures it
    showed (PNG); or why no figure lived. The pictures are those the page drew (`LabPage.watch_figures`)."""
    by_cell: dict[int, list[bytes]] = {}
    for index, png in lab.figure_frames():
        by_cell.setdefault(index, []).append(png)
    if not by_cell:
        return "06_training: no figure was shown while a cell was running"
    index, frames = max(by_cell.items(), key=lambda item: len(item[1]))
    changed = [frames[0]] + [b for a, b in zip(frames, frames[1:]) if images_differ(a, b)]
    if len(changed) < MIN_LIVE_FRAMES:
        return (
            f"06_training: the figure of cell {index} showed {len(changed)} different picture(s) while the "
            f"cell ran; a live plot shows at least {MIN_LIVE_FRAMES}"
        )
    return index, changed


def check_sample(lab: LabPage) -> str:
    """The sample text drawn under its header line (`=== sample ... ===`), not empty."""
    texts = lab.page.evaluate("__gptlib.outputTexts()")
    found = [m for t in texts if (m := SAMPLE_HEADER.search(t))]
    assert found, f"06_training: no output on the page shows a sample header ({SAMPLE_HEADER.pattern!r})"
    sample = found[-1].string[found[-1].end() :].strip()
    assert len(sample) >= 10, f"06_training: the sample under its header is empty or too short: {sample!r}"
    return sample


def check_exercises(lab: LabPage, name: str, *, workbook: bool) -> int:
    """Every exercise (a code cell with a piece for the learner) is checked by the code cell after it. In a
    lesson the piece is the reference, and the check says it passed; in an untouched workbook it is the
    stub, and the check says "not done yet" and where the answer is, not an error. Returns how many."""
    code = [c for c in lab.cells() if c["type"] == "code"]
    marker = 'raise NotImplementedError("your code here")' if workbook else "### BEGIN SOLUTION"
    exercises = [i for i, c in enumerate(code) if marker in c["source"]]
    assert exercises, f"{name}: no exercise found"
    for i in exercises:
        check = code[i + 1]
        text = "".join(
            "".join(out.get("text", "")) for out in check["outputs"] if out.get("output_type") == "stream"
        )
        said = "not done yet" in text and "uses the reference" in text if workbook else ": passed" in text
        assert said, (
            f"{name}: the check after exercise cell {code[i]['index']} (cell {check['index']}) says "
            f"{text[:300]!r}"
        )
    return len(exercises)


def test_lab_kernel_is_the_project_environment_in_smoke_mode(lab):
    code = (
        "import os, sys, gptlib; print(sys.prefix); print(gptlib.__file__); "
        "print(os.environ.get('GPTLIB_SMOKE'))"
    )
    prefix, package, smoke = lab.run_in_new_kernel(code).splitlines()
    assert Path(prefix) == Path(sys.prefix), f"Lab's python3 kernel runs in {prefix}, not in {sys.prefix}"
    assert Path(package).resolve().parent == (REPO / "gptlib").resolve(), (
        f"the kernel imports gptlib from {package}"
    )
    assert smoke == "1", "the kernel does not see GPTLIB_SMOKE=1"


@pytest.mark.parametrize("name", sorted(set(notebook_names()) | set(HOOKED)))
def test_notebook_runs_in_jupyterlab_as_the_learner_sees_it(name, lab, tmp_path):
    if not (notebooks_folder() / f"{name}.ipynb").is_file():
        pytest.fail(f"notebooks/{name}.ipynb does not exist; the learner's path needs it")
    lab.open(f"{name}.ipynb")
    try:
        lab.watch_figures()
        lab.start_run_all()
        lab.wait_run_done(timeout=RUN_TIMEOUT_S)
        assert_ran_cleanly(lab, name)
        check_exercises(lab, name, workbook=False)
        live = live_figure(lab) if name == "06_training" else None
        if isinstance(live, str):
            pytest.fail(live)

        if name == "01_bpe":
            check_token_widget(lab)
            lab.element_rect(TOKEN_INPUT)  # the screenshot shows the widget
        elif name == "06_training":
            index, frames = live
            for i, frame in enumerate(frames, 1):
                (tmp_path / f"live-figure-{i}.png").write_bytes(frame)
            check_sample(lab)
            lab.element_rect(f"__gptlib.cellNode({index}).querySelector('.jp-OutputArea-output img')")
        else:
            lab.page.evaluate("__gptlib.scrollToTop()")
        save_screenshot(lab, tmp_path / f"{name}-smoke.png")
    finally:
        close_quietly(lab, name)


@pytest.mark.parametrize("name", notebook_names())
def test_untouched_workbook_runs_in_jupyterlab_on_the_references(name, lab):
    """The learner's copy as they first open it: every stub untouched, Run All completes, each check says
    "not done yet" and the notebook runs on to its end on the reference pieces."""
    path = f"workbooks/{name}.ipynb"
    if not (notebooks_folder() / path).is_file():
        pytest.fail(f"notebooks/{path} does not exist: make workbooks writes it")
    lab.open(path)
    try:
        lab.start_run_all()
        lab.wait_run_done(timeout=RUN_TIMEOUT_S)
        assert_ran_cleanly(lab, path)
        check_exercises(lab, path, workbook=True)
    finally:
        close_quietly(lab, path)


# What a reader sees in the committed outputs without running anything: (a line of the cell's source, the kind
# of output it must have stored, a text its stored outputs must contain).
STORED = {
    "06_training": ("history = train(cfg, callback=live", "image/png", r"finished (\d+) steps"),
    "01_bpe": ("display(HTML(token_output.value))", "text/html", "bytes per token"),
}
FULL_SIZE_STEPS = 400  # 06's stored run trained make run's budget: more steps than any smoke run


@pytest.mark.parametrize("name", sorted(STORED))
def test_committed_outputs_show_without_running(name, lab, screenshot_dir):
    """Opened, not run: the stored outputs are there and drawn (01's tokens as HTML, 06's figure of the
    whole `cpu` run, not of a smoke run); their screenshot is the README's picture of the notebook."""
    marker, mime, text = STORED[name]
    lab.open(f"{name}.ipynb")
    try:
        cells = lab.cells()
        index = next((c["index"] for c in cells if marker in c["source"]), None)
        assert index is not None, f"{name}: no cell contains {marker!r}"
        outputs = cells[index]["outputs"]
        assert any(mime in o.get("data", {}) for o in outputs), (
            f"{name}: cell {index} stores no {mime} output"
        )
        stored = json.dumps(outputs)
        said = re.search(text, stored)
        assert said, f"{name}: cell {index}'s stored output does not say {text!r}"
        if said.groups():  # 06: the steps of a full-size run, not of a smoke run
            assert int(said.group(1)) >= FULL_SIZE_STEPS, f"{name}: the stored run is a smoke run: {said[0]}"
        assert not lab.drawn_errors(), f"{name}: the page shows an error in the stored outputs"
        drawn = "img" if mime == "image/png" else "span[title]"  # a picture, or tokens as coloured spans
        shown = lab.page.evaluate(
            f"(() => {{ const e = __gptlib.cellNode({index}).querySelector("
            f"'.jp-OutputArea-output {drawn}'); return !!e && (e.naturalWidth ?? 1) > 0; }})()"
        )
        assert shown, f"{name}: cell {index}'s stored {mime} output is not drawn"
        assert lab.element_rect(f"__gptlib.cellNode({index}).querySelector('.jp-OutputArea')")
        save_screenshot(lab, screenshot_dir / f"{name}.png")
    finally:
        close_quietly(lab, name)
