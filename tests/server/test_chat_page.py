"""The chat page in headless Chromium, driven over the DevTools protocol: a prompt sent from the
page streams an answer into the DOM that equals the API's answer to the same request (greedy, so
deterministic), the stop button aborts a long answer (and the server cancels it), and a screenshot
is kept under the build folder."""
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from websockets.sync.client import connect

from server_harness import ARTIFACTS_DIR, metric, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Browser:
    """Headless Chromium with one page, and a minimal DevTools-protocol client for it."""

    def __init__(self, profile_dir):
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--window-size=1100,800", "--remote-debugging-port=0",
             f"--user-data-dir={profile_dir}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(profile_dir) / "DevToolsActivePort"
        if not wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 60, 0.1):
            self.proc.kill()
            raise RuntimeError("chromium did not open its DevTools port")
        port = int(port_file.read_text().split()[0])
        pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10))
        url = next(p["webSocketDebuggerUrl"] for p in pages if p["type"] == "page")
        self.stack = contextlib.ExitStack()
        self.ws = self.stack.enter_context(connect(url, max_size=64 << 20, open_timeout=10))
        self.ids = itertools.count(1)

    def call(self, method, **params):
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:  # events arrive in between; skip them
            message = json.loads(self.ws.recv(timeout=30))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def eval(self, expression):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def close(self):
        try:
            self.stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM:
        pytest.skip("no chromium on PATH (scripts/install-deps.sh installs it)")
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


def open_page(browser, server, **query):
    browser.call("Page.enable")
    browser.call("Page.navigate", url=server.url + "/?" + urllib.parse.urlencode(query))


def wait_state(browser, states, timeout=90):
    state = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = browser.eval("document.body && document.body.dataset.state")
        if state in states:
            return state
        time.sleep(0.1)
    return state


def test_page_streams_an_answer(browser, open_server):
    prompt = "Tell me about the sea."
    open_page(browser, open_server, autoprompt=prompt, temperature=0, max_tokens=24, thinking=0)
    assert wait_state(browser, {"done", "error"}) == "done", browser.eval("document.body.innerText")
    shown = browser.eval("document.querySelector('.assistant .content').textContent")
    stats = browser.eval("document.querySelector('.assistant .stats').textContent")
    assert browser.eval("document.querySelector('.user').textContent") == prompt
    assert "tokens" in stats

    # The same request through the API: the page must show exactly the streamed answer.
    body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0, "top_p": 0.8, "max_tokens": 24,
            "chat_template_kwargs": {"enable_thinking": False}}
    req = urllib.request.Request(open_server.url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"]
    assert shown == answer and shown

    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    png = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    assert png.startswith(b"\x89PNG")
    (ARTIFACTS_DIR / "chat_page.png").write_bytes(png)


def test_stop_button_cancels_the_generation(browser, open_server):
    def cancelled():
        text = urllib.request.urlopen(open_server.url + "/metrics", timeout=10).read().decode()
        return metric(text, "megaqwen_generations_cancelled_total")

    before = cancelled()
    open_page(browser, open_server, autoprompt="Write a long story.", temperature=1, max_tokens=100000, thinking=0)
    assert wait_until(lambda: browser.eval(
        "(document.querySelector('.assistant .content') || {}).textContent || ''") != "", 60)
    browser.eval("document.getElementById('stop').click()")
    assert wait_state(browser, {"done", "error"}, 30) == "done"
    assert browser.eval("document.querySelector('.assistant .stats').textContent") == "stopped"
    assert wait_until(lambda: cancelled() == before + 1, 10)
