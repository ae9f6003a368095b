"""``memharness llm fetch | serve``: a local model as the cognitive engine.

``fetch`` puts a model's verified weights under ``models_dir`` (``make install-local-llm``
runs it). ``serve`` checks them again, prints the settings that point memharness at the
server, and becomes llama.cpp's OpenAI-compatible server on a loopback port (the process is
replaced, so Ctrl-C and signals reach the server itself).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from config import get_settings
from memharness.local_llm import (
    INSTALL_HINT,
    MODELS,
    ModelCheckFailed,
    client_settings,
    fetch_model,
    model_path,
    server_argv,
    server_installed,
    verify_model,
)

# Beside `memharness serve` (8080) and Flower (5555), free on a development machine.
DEFAULT_PORT = 8089
EXIT_MISSING = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("llm", help="a local model: fetch its weights, serve it")
    llm = p.add_subparsers(dest="llm_command", required=True)
    f = llm.add_parser("fetch", help="download and verify a model's weights into models_dir")
    f.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    f.set_defaults(func=_cmd_fetch)
    s = llm.add_parser("serve", help="llama.cpp's OpenAI-compatible server on 127.0.0.1")
    s.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--threads", type=int, default=None, help="default: llama.cpp's choice")
    s.set_defaults(func=_cmd_serve)


def _cmd_fetch(args: argparse.Namespace) -> int:
    model = MODELS[args.model]
    try:
        path = fetch_model(get_settings().models_dir, model)
    except (ModelCheckFailed, subprocess.CalledProcessError) as exc:
        print(f"error: {model.key}: {exc}", file=sys.stderr)
        return 1
    print(f"{model.key}: {path} ({model.size_bytes} bytes, sha256 {model.sha256}, verified)")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    model = MODELS[args.model]
    if not server_installed():
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return EXIT_MISSING
    path = model_path(get_settings().models_dir, model)
    try:
        header = verify_model(path, model)
    except ModelCheckFailed as exc:
        print(f"error: {exc}; run `memharness llm fetch --model {model.key}`", file=sys.stderr)
        return EXIT_MISSING
    name = header.get("general.name", model.file_name)
    print(f"# {model.key}: {name} ({model.license}); {model.source}", file=sys.stderr)
    print("# point memharness at it (workers, bench, serve) with:", file=sys.stderr)
    for key, value in client_settings(model, args.port).items():
        print(f"export {key}={value}")
    sys.stdout.flush()
    argv = server_argv(path, model, port=args.port, threads=args.threads)
    os.execv(argv[0], argv)
