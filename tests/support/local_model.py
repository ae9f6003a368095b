"""A real llama.cpp server on a spare loopback port, for the tests marked ``model``.

The server is the one ``memharness llm serve`` runs (the same argv), started as a child of the
test process and stopped by its own handle. When the extra or the verified weights are
absent the tests skip with the reason and the command that installs them.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from config import Settings, get_settings
from memharness.local_llm import (
    INSTALL_HINT,
    MODELS,
    LocalModel,
    ModelCheckFailed,
    client_settings,
    model_path,
    server_argv,
    server_installed,
    verify_model,
)

# SmolLM2's 98 MB load in about a second; the margin covers a machine busy with another run.
READY_TIMEOUT_S = 90.0


@dataclass
class LocalServer:
    model: LocalModel
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def settings(self, **overrides: object) -> Settings:
        env = client_settings(self.model, self.port)
        fields: dict[str, object] = {
            key.removeprefix("MEMHARNESS_").lower(): value for key, value in env.items()
        }
        return Settings(**(fields | overrides))  # type: ignore[arg-type]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def spare_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def weights_or_skip(key: str) -> Path:
    model = MODELS[key]
    if not server_installed():
        pytest.skip(INSTALL_HINT)
    path = model_path(get_settings().models_dir, model)
    try:
        verify_model(path, model)
    except ModelCheckFailed as exc:
        pytest.skip(f"{key} weights unusable ({exc}): run `make install-local-llm`")
    return path


def _wait_ready(server: LocalServer) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the model server exited early:\n{server.log_tail()}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{server.base_url}/models", timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the model server did not answer in {READY_TIMEOUT_S} s")


@contextlib.contextmanager
def serve_local_model(key: str = "smollm2", *, threads: int | None = None) -> Iterator[LocalServer]:
    path = weights_or_skip(key)
    model = MODELS[key]
    port = spare_port()
    with tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
        process = subprocess.Popen(
            server_argv(path, model, port=port, threads=threads),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LocalServer(model, port, process, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        log_path.unlink(missing_ok=True)
