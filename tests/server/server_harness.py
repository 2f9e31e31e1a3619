"""Starts and stops the real `megaqwen serve` binary for the Python tests and the load benchmark.

The server runs on a free port (--port 0; the port is read from its "listening on" line) with a tiny
synthetic model written by `megaqwen synth` into a temporary folder.
"""
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

BINARY = os.environ.get("MEGAQWEN_BINARY", "")
SHARED_DIR = os.environ.get("MEGAQWEN_SHARED_DIR", "")
ARTIFACTS_DIR = Path(os.environ.get("MEGAQWEN_ARTIFACTS_DIR", "/tmp/megaqwen-server-artifacts"))


def synth_tiny_model(out_dir, binary=None, shared_dir=None):
    """Writes the tiny synthetic model (real Qwen3 tokenizer, random weights) and returns its folder."""
    binary = binary or BINARY
    shared_dir = shared_dir or SHARED_DIR
    out = Path(out_dir) / "tiny"
    subprocess.run([binary, "synth", "--preset", "tiny", "--out", str(out),
                    "--tokenizer", str(Path(shared_dir) / "models" / "qwen3-0.6b")],
                   check=True, timeout=120, capture_output=True)
    return out


class ServerProcess:
    """One `megaqwen serve` process; its output is collected in `log` by a reader thread."""

    def __init__(self, model_dir, *args, binary=None, start_timeout=60):
        self.log = []
        self.proc = subprocess.Popen([binary or BINARY, "serve", "--model", str(model_dir), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._listening = threading.Event()
        self.port = None
        threading.Thread(target=self._read_output, daemon=True).start()
        if not self._listening.wait(start_timeout):
            self.proc.kill()
            raise RuntimeError("the server did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"

    def _read_output(self):
        for line in self.proc.stdout:
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and not self._listening.is_set():
                self.port = int(m.group(1))
                self._listening.set()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def status_kib(self, field):
        """A memory figure from /proc/PID/status (VmRSS, VmHWM), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def stop(self, timeout=15):
        """SIGTERM, as a service manager would; returns the exit status (0 for a clean shutdown)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("the server did not stop within %ss:\n%s" % (timeout, "".join(self.log)))


def wait_until(predicate, timeout, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def metric(text, name):
    """The value of one unlabelled Prometheus sample (or a labelled one, given with its labels)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None
