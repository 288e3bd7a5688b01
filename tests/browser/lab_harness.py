"""Drive JupyterLab in headless Chromium over the DevTools protocol, the way a learner sees it.

Three pieces, each owning one process or connection:
- `LabServer`: `jupyter lab` from this environment on a free loopback port with a random token, rooted
  at a folder the caller chooses (a temporary copy of the notebooks), its kernels in smoke mode.
- `Chromium`: Debian's `chromium-headless-shell`, with a fresh profile, its DevTools port read from
  the `DevToolsActivePort` file it writes.
- `DevTools` / `Page`: a small synchronous client of the DevTools protocol over `websocket-client`
  (flattened target sessions), and `LabPage`, which opens a notebook, runs every cell through Lab's own
  command registry and reads back what the page shows.

Lab exposes its application object as `window.jupyterapp` when started with
`--LabApp.expose_app_in_browser=True`; commands then run exactly as from the menu
(`notebook:run-all-cells`), and their promises resolve when the cells have finished.
The protocol itself is documented at https://chromedevtools.github.io/devtools-protocol/.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import deque
from pathlib import Path

CHROMIUM_PATHS = ("/usr/lib/chromium/chromium-headless-shell",)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",  # containers often give /dev/shm only 64 MB
    "--remote-debugging-port=0",
)

# Lab settings for a quiet, deterministic session: every cell stays in the DOM (no windowing), cell
# timings recorded, no news or update toasts over the screenshots, no autosave into the notebook copy.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none",
        "recordTiming": True,
    },
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
        "doNotDisturbMode": True,
    },
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


REPO = Path(__file__).resolve().parents[2]


def notebooks_folder() -> Path:
    """The notebooks to check: `$GPTLIB_BROWSER_NOTEBOOKS`, else the checkout's notebooks/."""
    return Path(os.environ.get("GPTLIB_BROWSER_NOTEBOOKS") or REPO / "notebooks").resolve()


def notebook_names() -> list[str]:
    return sorted(p.stem for p in notebooks_folder().glob("[0-9]*.ipynb"))


def _file_tail(path: Path, n: int) -> str:
    """The last `n` characters of a log file, or "" when it cannot be read."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class HarnessError(RuntimeError):
    """A process of the harness did not start, or the page did not reach an expected state."""


def find_chromium() -> str | None:
    """The headless Chromium to drive: `$GPTLIB_CHROMIUM`, else Debian's `chromium-headless-shell`
    binary (launched directly: its `/usr/bin` wrapper leaves the browser behind when stopped)."""
    candidates = [os.environ.get("GPTLIB_CHROMIUM", ""), *CHROMIUM_PATHS]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Every live descendant of `pid` (read from /proc), deepest last."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _die_with_parent() -> None:
    """In a child before exec: ask Linux to send SIGTERM when the test process dies, even by SIGKILL,
    so a killed test run leaves no server or browser behind (no-op where prctl is missing)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return


def _stop_process_tree(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop `proc` (started in a session of its own) and every process it started, by their ids:
    SIGTERM to its group first, SIGKILL to whatever is left after `grace` seconds."""
    if proc.poll() is not None and not _children(proc.pid):
        return
    descendants = _children(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + grace
    for pid in [proc.pid, *descendants]:
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
            time.sleep(0.1)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class LabServer:
    """`jupyter lab` from this interpreter's environment, serving `root` on a free loopback port."""

    def __init__(self, root: Path, workdir: Path, *, env: dict[str, str] | None = None):
        self.root, self.workdir = Path(root), Path(workdir)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = self.workdir / "jupyterlab.log"
        self._extra_env = env or {}
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LabServer:
        settings_dir = self.workdir / "lab-user-settings"
        for name, values in LAB_SETTINGS.items():
            path = settings_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(self.workdir / "jupyter-config"),
            "JUPYTER_RUNTIME_DIR": str(self.workdir / "jupyter-runtime"),
            "JUPYTER_DATA_DIR": str(self.workdir / "jupyter-data"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.workdir / "lab-workspaces"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings_dir),
            "IPYTHONDIR": str(self.workdir / "ipython"),
            "MPLCONFIGDIR": str(self.workdir / "matplotlib"),
            **self._extra_env,
        }
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
        ]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            command,
            cwd=self.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.25)
        raise HarnessError(f"jupyter lab did not answer within {timeout:.0f} s:\n{self.log_tail()}")

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}{path}?token={self.token}", method=method)
        with urllib.request.urlopen(request, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        try:
            for kernel in self.api("/api/kernels"):
                self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        except OSError:
            pass

    def log_tail(self, n: int = 4000) -> str:
        return _file_tail(self.log_path, n)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.shutdown_kernels()
            _stop_process_tree(self.proc)


class Chromium:
    """Headless Chromium with a fresh profile under `workdir`; `websocket_url` is its browser target."""

    def __init__(self, binary: str, workdir: Path):
        self.binary, self.workdir = binary, Path(workdir)
        self.profile = Path(tempfile.mkdtemp(prefix="chromium-profile-", dir=self.workdir))
        self.log_path = self.workdir / "chromium.log"
        self.proc: subprocess.Popen | None = None
        self.websocket_url = ""

    def start(self, timeout: float = 30.0) -> Chromium:
        log = open(self.log_path, "wb")
        command = [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"]
        self.proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HarnessError(f"chromium exited with {self.proc.returncode}:\n{self.log_tail()}")
            lines = port_file.read_text().split() if port_file.is_file() else []
            if len(lines) == 2:
                self.websocket_url = f"ws://127.0.0.1:{lines[0]}{lines[1]}"
                return self
            time.sleep(0.1)
        raise HarnessError(f"chromium wrote no DevToolsActivePort within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 3000) -> str:
        return _file_tail(self.log_path, n)

    def stop(self) -> None:
        if self.proc is not None:
            _stop_process_tree(self.proc, grace=5.0)
        shutil.rmtree(self.profile, ignore_errors=True)


class DevToolsError(RuntimeError):
    """The browser answered a DevTools command with an error, or a page script threw."""


class DevTools:
    """One websocket to the browser target; commands for pages go through flattened sessions."""

    def __init__(self, websocket_url: str, timeout: float = 30.0):
        # websocket-client (a Jupyter dependency), imported here: the notebook-structure test, which only
        # reads JSON, imports this module too and needs nothing beyond pytest.
        import websocket

        self._websocket = websocket
        # Chromium refuses DevTools websockets that carry an Origin header it was not told to allow.
        self._ws = websocket.create_connection(websocket_url, timeout=timeout, suppress_origin=True)
        self._next_id = 0
        self.events: deque[dict] = deque(maxlen=200)

    def call(
        self, method: str, params: dict | None = None, *, session: str | None = None, timeout: float = 60.0
    ) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            self._ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                reply = json.loads(self._ws.recv())
            except self._websocket.WebSocketTimeoutException:
                raise DevToolsError(f"{method}: no answer within {timeout:.0f} s") from None
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def new_page(self, width: int, height: int) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.call("Runtime.enable")
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def close(self) -> None:
        try:
            self._ws.close()
        except OSError:
            pass


class Page:
    """A browser tab: evaluate scripts, wait for conditions, click, type, take screenshots."""

    def __init__(self, devtools: DevTools, session: str):
        self.devtools, self.session = devtools, session

    def call(self, method: str, params: dict | None = None, timeout: float = 60.0) -> dict:
        return self.devtools.call(method, params, session=self.session, timeout=timeout)

    def evaluate(self, expression: str, *, await_promise: bool = False, timeout: float = 60.0):
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": await_promise, "returnByValue": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise DevToolsError(f"page script failed: {text}\nscript: {expression[:300]}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float, what: str, interval: float = 0.25):
        """Poll `expression` until it is truthy and return its value; fail naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(interval)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def screenshot(self, clip: dict | None = None) -> bytes:
        params: dict = {"format": "png"}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", params)["data"])

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )

    def insert_text(self, text: str) -> None:
        """Type `text` into the focused element, as an input method would (fires `input` events)."""
        self.call("Input.insertText", {"text": text})

    def press(self, key: str, code: str, key_code: int) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                {"type": kind, "key": key, "code": code, "windowsVirtualKeyCode": key_code},
            )


# Page-side helpers, installed once per page load. They read Lab's own objects: the notebook widget
# (`jupyterapp.shell`), its cells' models (what the outputs are) and the DOM (what is drawn).
LAB_HELPERS = r"""
window.__gptlib = {
  notebook: null,
  run: null,
  async open(path) {
    const app = window.jupyterapp;
    const widget = await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
    await widget.context.ready;
    await widget.sessionContext.ready;
    for (const other of [...app.shell.widgets('main')]) if (other !== widget) other.close();
    app.shell.activateById(widget.id);
    this.notebook = widget;
    this.run = null;
    app.shell.collapseLeft();
    return widget.id;
  },
  kernelStatus() {
    const kernel = this.notebook && this.notebook.sessionContext.session
      && this.notebook.sessionContext.session.kernel;
    return kernel ? kernel.status : 'none';
  },
  startRunAll() {
    const app = window.jupyterapp;
    app.shell.activateById(this.notebook.id);
    const run = {done: false, ok: null, error: null, started: Date.now(), finished: null};
    app.commands.execute('notebook:run-all-cells').then(
      (ok) => { run.done = true; run.ok = ok; run.finished = Date.now(); },
      (err) => { run.done = true; run.error = String(err); run.finished = Date.now(); });
    this.run = run;
    return true;
  },
  cells() {
    return this.notebook.content.widgets.map((cell, index) => {
      const model = cell.model;
      const info = {index, type: model.type, count: null, outputs: [], running: false};
      if (model.type === 'code') {
        info.count = model.executionCount;
        info.outputs = model.outputs.toJSON();
        const prompt = cell.node.querySelector('.jp-InputPrompt');
        info.running = !!prompt && prompt.textContent.includes('*');
      }
      info.source = model.sharedModel.getSource();
      info.tags = model.getMetadata('tags') || [];
      const timing = model.getMetadata('execution') || {};
      const start = timing['iopub.execute_input'], end = timing['shell.execute_reply'];
      info.seconds = start && end ? (Date.parse(end) - Date.parse(start)) / 1000 : null;
      return info;
    });
  },
  async runInNewKernel(code) {
    // Start a kernel the way Lab does for a new notebook, run `code`, return its stdout.
    const kernel = await window.jupyterapp.serviceManager.kernels.startNew({name: 'python3'});
    try {
      let text = '';
      const future = kernel.requestExecute({code});
      future.onIOPub = (msg) => { if (msg.header.msg_type === 'stream') text += msg.content.text; };
      await future.done;
      return text;
    } finally {
      await kernel.shutdown();
    }
  },
  cellNode(index) { return this.notebook.content.widgets[index].node; },
  runningCell() {
    // The first cell whose prompt shows `[*]` (queued cells show it too, but run after it).
    const cells = this.notebook.content.widgets;
    for (let i = 0; i < cells.length; i++) {
      const prompt = cells[i].node.querySelector('.jp-InputPrompt');
      if (cells[i].model.type === 'code' && prompt && prompt.textContent.includes('*')) return i;
    }
    return -1;
  },
  watchFigures() {
    // Record each picture an output area shows, the moment the page draws it: the cell it is in, its data
    // URI and whether that cell was running then. Driven by DOM mutations, not by polling, so a fast
    // machine cannot finish a cell between two looks.
    const frames = [];
    const cells = this.notebook.content.widgets;
    const record = (img) => {
      const index = cells.findIndex((cell) => cell.node.contains(img));
      const src = img.getAttribute('src') || '';
      if (index < 0 || !src.startsWith('data:image/png;base64,')) return;
      const previous = frames.filter((f) => f.cell === index).pop();
      if (previous && previous.src === src) return;
      frames.push({cell: index, src, running: this.runningCell() === index});
    };
    const observer = new MutationObserver((mutations) => {
      for (const m of mutations) {
        if (m.type === 'attributes' && m.target.tagName === 'IMG') record(m.target);
        for (const node of m.addedNodes) {
          if (node.nodeType !== Node.ELEMENT_NODE) continue;
          if (node.tagName === 'IMG') record(node);
          node.querySelectorAll('img').forEach(record);
        }
      }
    });
    observer.observe(this.notebook.content.node,
                     {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
    this.figures = {frames, observer};
    return true;
  },
  figureFrames() {
    // What watchFigures recorded, the pictures of running cells only; stops recording.
    if (!this.figures) return [];
    this.figures.observer.disconnect();
    return this.figures.frames.filter((f) => f.running).map((f) => ({cell: f.cell, src: f.src}));
  },
  outputTexts() {
    return [...this.notebook.node.querySelectorAll('.jp-OutputArea-output')].map((e) => e.textContent);
  },
  scrollToTop() {
    this.notebook.content.activeCellIndex = 0;
    const first = this.notebook.content.widgets[0];
    if (first) first.node.scrollIntoView({block: 'start'});
    return true;
  },
  drawnErrors() {
    // Tracebacks as the page draws them, and widgets that failed to render.
    const found = [];
    const root = this.notebook.node;
    for (const out of root.querySelectorAll('.jp-OutputArea-output')) {
      const text = out.textContent || '';
      if (text.includes('Traceback (most recent call last)')) found.push(text.slice(0, 800));
      if (text.includes('Error displaying widget') || text.includes('Error rendering output'))
        found.push(text.slice(0, 300));
    }
    return found;
  },
  rect(element) {
    element.scrollIntoView({block: 'center'});
    const r = element.getBoundingClientRect();
    return {x: r.left, y: r.top, width: r.width, height: r.height};
  },
  async close() {
    const widget = this.notebook;
    if (!widget) return true;
    await widget.sessionContext.shutdown();
    widget.context.model.dirty = false;
    widget.dispose();
    this.notebook = null;
    return true;
  },
};
true;
"""


class LabPage:
    """JupyterLab open in a `Page`: open notebooks, run all cells, read outputs, take screenshots."""

    def __init__(self, page: Page, server: LabServer):
        self.page, self.server = page, server

    def load(self, timeout: float = 90.0) -> LabPage:
        self.page.navigate(f"{self.server.url}/lab?token={self.server.token}&reset")
        self.page.wait_for(
            "!!(window.jupyterapp && window.jupyterapp.shell)", timeout=timeout, what="JupyterLab to start"
        )
        self.page.evaluate("window.jupyterapp.restored.then(() => true)", await_promise=True, timeout=timeout)
        self.page.evaluate(LAB_HELPERS)
        return self

    def open(self, path: str, timeout: float = 90.0) -> None:
        self.page.evaluate(f"__gptlib.open({json.dumps(path)})", await_promise=True, timeout=timeout)
        self.page.wait_for(
            "__gptlib.kernelStatus() === 'idle'", timeout=timeout, what=f"the kernel of {path} to be idle"
        )

    def start_run_all(self) -> None:
        self.page.evaluate("__gptlib.startRunAll()")

    def watch_figures(self) -> None:
        """Start recording every picture drawn in the notebook's outputs (see `figure_frames`)."""
        self.page.evaluate("__gptlib.watchFigures()")

    def figure_frames(self) -> list[tuple[int, bytes]]:
        """The distinct pictures drawn while their cell was running, in order, as (cell index, PNG bytes)."""
        frames = self.page.evaluate("__gptlib.figureFrames()")
        prefix = "data:image/png;base64,"
        return [(f["cell"], base64.b64decode(f["src"][len(prefix) :])) for f in frames]

    def run_state(self) -> dict:
        return self.page.evaluate("__gptlib.run")

    def wait_run_done(self, timeout: float) -> dict:
        self.page.wait_for("__gptlib.run && __gptlib.run.done", timeout=timeout, what="all cells to finish")
        self.page.wait_for(
            "__gptlib.kernelStatus() === 'idle'", timeout=30, what="the kernel to be idle after the run"
        )
        return self.run_state()

    def cells(self) -> list[dict]:
        return self.page.evaluate("__gptlib.cells()")

    def drawn_errors(self) -> list[str]:
        return self.page.evaluate("__gptlib.drawnErrors()")

    def element_rect(self, selector_script: str) -> dict | None:
        """The on-screen box of the element `selector_script` evaluates to (scrolled into view)."""
        return self.page.evaluate(
            f"(() => {{ const e = {selector_script}; return e ? __gptlib.rect(e) : null; }})()"
        )

    def screenshot_element(self, selector_script: str) -> bytes | None:
        rect = self.element_rect(selector_script)
        if not rect or rect["width"] < 1 or rect["height"] < 1:
            return None
        time.sleep(0.1)  # let the scroll settle before the capture
        return self.page.screenshot(clip=rect)

    def run_in_new_kernel(self, code: str, timeout: float = 90.0) -> str:
        """The stdout of `code` run in a fresh kernel of Lab's default kind (`python3`)."""
        return self.page.evaluate(
            f"__gptlib.runInNewKernel({json.dumps(code)})", await_promise=True, timeout=timeout
        )

    def close_notebook(self) -> None:
        self.page.evaluate("__gptlib.close()", await_promise=True, timeout=60)


def error_outputs(cells: list[dict]) -> list[str]:
    """The error outputs in the notebook's model, one line per error: cell index, name, value."""
    found = []
    for cell in cells:
        for out in cell["outputs"]:
            if out.get("output_type") == "error":
                found.append(f"cell {cell['index']}: {out.get('ename')}: {out.get('evalue')}")
    return found


def output_text(cells: list[dict]) -> str:
    """All stream and text/plain output of the notebook, in order."""
    parts = []
    for cell in cells:
        for out in cell["outputs"]:
            if out.get("output_type") == "stream":
                text = out.get("text", "")
                parts.append(text if isinstance(text, str) else "".join(text))
            elif "data" in out and "text/plain" in out["data"]:
                text = out["data"]["text/plain"]
                parts.append(text if isinstance(text, str) else "".join(text))
    return "".join(parts)
