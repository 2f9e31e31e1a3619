"""Fixtures of the server tests: the tiny model (once per session) and servers on free ports."""
import os

import pytest

from server_harness import BINARY, SHARED_DIR, ServerProcess, synth_tiny_model


def pytest_configure(config):
    if not BINARY or not os.path.exists(BINARY):
        raise pytest.UsageError("set MEGAQWEN_BINARY to the built megaqwen binary (ctest does)")
    if not SHARED_DIR:
        raise pytest.UsageError("set MEGAQWEN_SHARED_DIR to the shared/ folder (ctest does)")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return synth_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def server(tiny_model):
    """A server with an API key and a small context (prompts over 512 tokens are refused)."""
    s = ServerProcess(tiny_model, "--api-key", "test-key", "--ctx", "512", "--max-body-mib", "1")
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def open_server(tiny_model):
    """A server without an API key."""
    s = ServerProcess(tiny_model, "--ctx", "512")
    yield s
    assert s.stop() == 0, "".join(s.log)
