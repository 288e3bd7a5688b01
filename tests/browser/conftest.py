"""One JupyterLab server and one headless Chromium for the whole browser test session.

Both run from a temporary folder: the server serves a COPY of the notebooks, so running cells never
touches the repository's notebooks, and every process started here is stopped by the fixtures'
teardown, whether the tests pass or fail.

Environment:
- `GPTLIB_CHROMIUM`: the headless Chromium binary (default: Debian's chromium-headless-shell).
- `GPTLIB_BROWSER_NOTEBOOKS`: the folder of notebooks to check (default: the checkout's notebooks/).
- `GPTLIB_SCREENSHOTS`: where to write one PNG per notebook (default: the test's temporary folder;
  `GPTLIB_SCREENSHOTS=docs/screenshots` refreshes the README's pictures).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from lab_harness import REPO, Chromium, DevTools, LabPage, LabServer, find_chromium, notebooks_folder

VIEWPORT = (1280, 900)


@pytest.fixture(scope="session")
def chromium_binary() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "no headless Chromium: install Debian's chromium-headless-shell "
            "(apt-get install chromium-headless-shell) or set GPTLIB_CHROMIUM"
        )
    return binary


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory) -> Path:
    """A temporary copy of the notebooks folder, the server's root."""
    root = tmp_path_factory.mktemp("lab") / "notebooks"
    shutil.copytree(notebooks_folder(), root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return root


@pytest.fixture(scope="session")
def lab(chromium_binary, lab_root, tmp_path_factory):
    """JupyterLab open in a headless Chromium tab, kernels in smoke mode. Stops both at the end."""
    workdir = tmp_path_factory.mktemp("lab-processes")
    server = LabServer(lab_root, workdir, env={"GPTLIB_SMOKE": "1"})
    browser = Chromium(chromium_binary, workdir)
    devtools = None
    try:
        server.start()
        browser.start()
        devtools = DevTools(browser.websocket_url)
        page = devtools.new_page(*VIEWPORT)
        yield LabPage(page, server).load()
    finally:
        if devtools is not None:
            devtools.close()
        browser.stop()
        server.stop()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory) -> Path:
    target = os.environ.get("GPTLIB_SCREENSHOTS")
    if not target:
        return tmp_path_factory.mktemp("screenshots")
    folder = Path(target)
    if not folder.is_absolute():
        folder = REPO / folder
    folder.mkdir(parents=True, exist_ok=True)
    return folder
