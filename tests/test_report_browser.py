"""`orch report`'s file opened in real headless Chromium (Debian's `chromium`, which `make test`
installs when missing), driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`:
no port, no client library): no request leaves the page, no console error, every figure drawn,
a screenshot that is not blank. A control page with an outside image and a thrown error proves the
harness sees both."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from report_runs import fill

from orchestrator import report

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(  # as root a missing chromium fails the test: `make test` installs it
    CHROMIUM is None and os.geteuid() != 0,
    reason="chromium is not installed and this user is not root (as root, `make system-deps` installs it)")

# Pixel spread of the screenshot, measured in the page itself on a canvas (no image library needed).
PIXEL_SPREAD = """new Promise(done => { const img = new Image(); img.onload = () => {
  const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data; let n = 0, s = 0, s2 = 0;
  for (let i = 0; i < d.length; i += 16) { const v = (d[i] + d[i + 1] + d[i + 2]) / 3; n++; s += v; s2 += v * v; }
  done(s2 / n - (s / n) ** 2); }; img.src = 'data:image/png;base64,' + SHOT; })"""
FIGURES_DRAWN = """[...document.querySelectorAll('div.figure')].map(d => [d.id,
  d.querySelectorAll('svg.main-svg').length, d.querySelectorAll('.trace, .boxlayer path, .point').length])"""


def _as_fds_3_and_4(commands: int, answers: int) -> None:
    """In the child before exec: the pipe ends where Chromium looks for them (copied first, so
    neither overwrites the other)."""
    commands, answers = os.dup(commands), os.dup(answers)
    os.dup2(commands, 3)
    os.dup2(answers, 4)


class Browser:
    """Headless Chromium driven over its DevTools pipe: fd 3 carries commands in, fd 4 answers out,
    each message JSON ending in a NUL byte."""

    def __init__(self, profile: Path):
        if CHROMIUM is None:
            pytest.fail("chromium is not installed: `make system-deps` (part of `make test`) installs Debian's chromium")
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()
        self._log_path = profile.parent / "chromium.log"
        self._log = self._log_path.open("wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "--no-first-run", "--disable-extensions",
             "--disable-sync", "--disable-background-networking", "--disable-component-update",
             "--window-size=1280,900", "about:blank"],
            pass_fds=(3, 4), preexec_fn=lambda: _as_fds_3_and_4(to_browser, from_browser),
            stdout=subprocess.DEVNULL, stderr=self._log)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._next, self.events = b"", 0, []

    def call(self, method: str, session: str | None = None, **params):
        self._next += 1
        message = {"id": self._next, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                tail = self._log_path.read_text(errors="replace")[-2000:]
                raise AssertionError(f"chromium closed its DevTools pipe; its output:\n{tail}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str) -> str:
        """A new tab showing `url` with network, console and log events on; its session id."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Network", "Runtime", "Log", "Page"):
            self.call(f"{domain}.enable", session)
        self.call("Page.navigate", session, url=url)
        return session

    def evaluate(self, session: str, expression: str):
        result = self.call("Runtime.evaluate", session, expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait(self, session: str, expression: str, seconds: float = 20):
        deadline = time.monotonic() + seconds
        while not self.evaluate(session, expression):
            assert time.monotonic() < deadline, f"page never reached: {expression}"
            time.sleep(0.05)

    def seen(self, session: str) -> tuple[list[str], list[str]]:
        """(URLs requested, console errors and exceptions) by the tab of `session` so far."""
        mine = [e for e in self.events if e.get("sessionId") == session]
        requests = [e["params"]["request"]["url"] for e in mine if e["method"] == "Network.requestWillBeSent"]
        errors = [json.dumps(e["params"])[:300] for e in mine if e["method"] == "Runtime.exceptionThrown"
                  or e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error"
                  or e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error"]
        return requests, errors

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self._log.close()


def look(browser: Browser, page_file: Path) -> dict:
    """Open the file in a new tab and read what a reader would see: the figures drawn (id, svg
    count, marks), every request, the console errors, the screenshot and its pixel spread."""
    page = browser.open(page_file.as_uri())
    browser.wait(page, "document.readyState === 'complete' && document.querySelectorAll('svg.main-svg').length > 0")
    drawn = browser.evaluate(page, FIGURES_DRAWN)
    requests, errors = browser.seen(page)
    shot = browser.call("Page.captureScreenshot", page, format="png")["data"]
    browser.call("Network.disable", page)  # the spread check loads the screenshot as a data: URL
    spread = browser.evaluate(page, PIXEL_SPREAD.replace("SHOT", json.dumps(shot)))
    return {"page": page, "drawn": drawn, "requests": requests, "errors": errors, "shot": base64.b64decode(shot),
            "spread": spread}


def assert_seen_whole(seen: dict, page_file: Path, figures: set[str]) -> None:
    assert seen["requests"] == [page_file.as_uri()], seen["requests"]  # the file itself and nothing else
    assert seen["errors"] == []
    assert {name for name, _, _ in seen["drawn"]} == figures
    assert all(svgs >= 1 and marks >= 1 for _, svgs, marks in seen["drawn"]), seen["drawn"]
    assert len(seen["shot"]) > 10_000 and seen["spread"] > 100, seen["spread"]


def test_report_opens_offline_with_every_figure_drawn(tmp_path):
    out = tmp_path / "report.html"
    report.write(fill(tmp_path / "o.db"), "sweep", out)
    control = tmp_path / "control.html"
    control.write_text('<img src="http://example.invalid/x.png"><script>throw new Error("control")</script>')
    browser = Browser(tmp_path / "profile")
    try:
        seen = look(browser, out)
        injected = browser.evaluate(seen["page"], "typeof window.__injected")
        guard = browser.open(control.as_uri())
        browser.wait(guard, "document.readyState === 'complete'")
        control_requests, control_errors = browser.seen(guard)
    finally:
        browser.close()
    assert_seen_whole(seen, out, {"spread-accept_len", "spread-output_tok_s", "by-model", "by-steps", "by-topk",
                                  "headline-over-time", "pareto"})
    assert injected == "undefined"  # the hostile run's markup stayed text
    assert "http://example.invalid/x.png" in control_requests and any("control" in e for e in control_errors)


# What a reader sees of the figures: each one's axis tick texts, legend texts and axis titles, as drawn
DRAWN_TEXTS = """Object.fromEntries([...document.querySelectorAll('div.figure')].map(d => [d.id, {
  ticks: [...d.querySelectorAll('.xtick text')].map(t => t.textContent),
  yticks: [...d.querySelectorAll('.ytick text')].map(t => t.textContent),
  title: (d.querySelector('.gtitle') || {}).textContent,
  legend: [...d.querySelectorAll('.legendtext')].map(t => t.textContent),
  titles: [...d.querySelectorAll('.g-xtitle text, .g-ytitle text')].map(t => t.textContent)}]))"""
# Pairs of tick labels of one axis whose boxes overlap (label text drawn over label text)
OVERLAPPING_TICKS = """[...document.querySelectorAll('div.figure')].flatMap(d => {
  const boxes = [...d.querySelectorAll('.xtick text, .ytick text')].map(t => t.getBoundingClientRect());
  return boxes.flatMap((a, i) => boxes.slice(i + 1).filter(b => a.left < b.right && b.left < a.right
    && a.top < b.bottom && b.top < a.bottom).map(() => d.id)); })"""


def test_a_tuning_report_speaks_in_params_and_fits_1400_pixels(tmp_path):
    """A steps x topk sweep's report in a 1400-pixel window: no sideways scrolling, the configurations
    named by their swept values on the axes and in the legends, the Pareto figure drawn with its front."""
    from tuning_runs import STEPS, TOPK, fill as fill_tuning

    out = tmp_path / "report.html"
    report.write(fill_tuning(tmp_path / "t.db", {"maximize": "output_tok_s", "subject_to": ["accept_len >= 2"]}),
                 "tuning", out)
    browser = Browser(tmp_path / "profile")
    try:
        page = browser.open("about:blank")
        browser.call("Emulation.setDeviceMetricsOverride", page, width=1400, height=1000, deviceScaleFactor=1,
                     mobile=False)
        browser.call("Page.navigate", page, url=out.as_uri())
        browser.wait(page, "document.readyState === 'complete' && document.querySelectorAll('#pareto svg.main-svg').length")
        width = browser.evaluate(page, "[document.documentElement.scrollWidth, document.body.scrollWidth, innerWidth]")
        texts = browser.evaluate(page, DRAWN_TEXTS)
        overlapping = browser.evaluate(page, OVERLAPPING_TICKS)
        _, errors = browser.seen(page)
    finally:
        browser.close()
    assert errors == [] and max(width[:2]) <= 1400, width
    labels = {f"speculative_num_steps={s} speculative_eagle_topk={k}" for s in STEPS for k in TOPK}
    spread = texts["spread-output_tok_s"]["yticks"]  # a configuration a row, without the names' shared start
    assert {tick.replace("eagle", "speculative_eagle").replace("num_", "speculative_num_") for tick in spread} == labels
    assert texts["spread-output_tok_s"]["title"].rstrip("\u200b").endswith("params without speculative_")
    assert {t.rstrip(" ★") for t in texts["pareto"]["legend"]} == labels | {"Pareto front"}
    assert sum(t.endswith(" ★") for t in texts["pareto"]["legend"]) >= 2  # the front's configurations, starred
    assert texts["pareto"]["titles"][0].startswith("itl_ms_p99") and texts["pareto"]["titles"][1] == "output_tok_s"
    assert set(texts["by-speculative_num_steps"]["legend"]) == {f"speculative_eagle_topk={k}" for k in TOPK}
    assert texts["by-speculative_num_steps"]["ticks"] == [str(s) for s in STEPS]
    assert set(texts["headline-over-time"]["legend"]) == labels
    assert overlapping == []


@pytest.mark.slow
def test_the_report_of_a_rehearsal_sweep(project):
    """A real rehearsal sweep (3 steps x 2 topk, 2 repeats, the 2 variants: 24 runs) recorded, reported, opened."""
    from conftest import ROOT, free_port
    from support.cli import orch

    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("requests: 16", "requests: 4")
    path = project / "experiments" / "sweep.yaml"
    path.write_text(text + "\nmatrix:\n  speculative_num_steps: [3, 5, 7]\n  speculative_eagle_topk: [1, 4]\n"
                    "repeats: 2\n")
    assert orch(project, "run", str(path), "--set", f"port={free_port()}").returncode == 0
    done = orch(project, "report", "eagle_debug", "-o", "report.html")
    assert done.returncode == 0, done.stderr
    browser = Browser(project / "profile")
    try:
        seen = look(browser, project / "report.html")
    finally:
        browser.close()
    # the draft tokens as the engine ran them (steps + 1 at topk 1) differ with the steps: swept too
    swept = {"by-speculative_algorithm", "by-speculative_num_steps", "by-speculative_eagle_topk",
             "by-speculative_num_draft_tokens"}
    assert_seen_whole(seen, project / "report.html", {"spread-accept_len", "spread-output_tok_s", "headline-over-time",
                                                      "pareto", *swept})
