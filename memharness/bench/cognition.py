"""``memharness bench cognition``: the background's decisions scored on labeled sets, for the
offline rules and a model in the same run.

A section is a module ``memharness.bench.cognition_<name>`` exposing
``run(llm, data_dir: pathlib.Path) -> dict``; it reads its labeled set under ``data_dir``
(default ``tests/data/cognition`` of the repository) and returns its figures (precision and
recall per decision and per language). A section whose module is absent is reported as
"section not available", so sections join the bench by existing.

Every section runs once with the offline adapter (``OfflineLLM``: the rules); with
``--llm openai`` it runs a second time with the adapter ``workers.adapters.build_llm`` makes
of the settings (the configured base URL and models: DeepSeek, or a local llama.cpp server),
so the rules and the model are compared on the same pairs in the same run. Each run's model
calls are counted per port method, with their latency (p50/p95, nearest rank), and its tokens
are read from the token ledger the adapter records into (``workers.ledger.MemoryLedger``, the
same port the workers' PostgreSQL ledger implements): what the server reported, never an
estimate; the offline rules record none. The write section, whose inputs are recorded turns,
also reports its tokens per 1,000 turns.

``--limit N --seed S`` runs the sections that take a ``sample`` (``write``, ``compress``) on at
most N items per language, the same items for the rules and the model
(``memharness.bench.sampling``); the other sections run their whole set, and the report says
which were sampled.

Tables go to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from memharness.bench.sampling import Sample
from memharness.bench.scratch import percentile
from pipelines.ports import LLM
from workers.ledger import MemoryLedger, TokenUsage

SECTIONS = ("corrections", "write", "compress", "knowledge", "causal")
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "cognition"
NOT_AVAILABLE = "section not available"
# The tenant a bench run's calls are recorded under in its ledger.
BENCH_TENANT = "bench"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class MeteredLLM:
    """An LLM port that forwards every call to ``inner`` and records its method and wall
    time (failed calls too: a model that times out still cost the wait)."""

    def __init__(self, inner: LLM) -> None:
        self._inner = inner
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.failures: dict[str, int] = defaultdict(int)

    @property
    def name(self) -> str:
        return self._inner.name

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self._inner, attr)
        if attr.startswith("_") or not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return target(*args, **kwargs)
            except Exception:
                self.failures[attr] += 1
                raise
            finally:
                self.seconds[attr].append(time.perf_counter() - began)

        return call

    def report(self, usage: TokenUsage) -> dict[str, Any]:
        """Calls and latencies, and ``usage``: the ledger's tokens of these calls."""
        every = [s for samples in self.seconds.values() for s in samples]

        def ms(samples: Sequence[float], q: float) -> float | None:
            return round(percentile(samples, q) * 1000, 3) if samples else None

        return {
            "calls": len(every),
            "failed_calls": sum(self.failures.values()),
            "calls_by_method": {name: len(s) for name, s in sorted(self.seconds.items())},
            "latency_p50_ms": ms(every, 0.50),
            "latency_p95_ms": ms(every, 0.95),
            "answered_calls": usage.calls,
            "tokens_in": usage.prompt,
            "tokens_in_cached": usage.cached,
            "tokens_out": usage.completion,
            "tokens_out_reasoning": usage.reasoning,
        }


def minus(after: TokenUsage, before: TokenUsage) -> TokenUsage:
    return TokenUsage(
        prompt=after.prompt - before.prompt,
        completion=after.completion - before.completion,
        cached=after.cached - before.cached,
        reasoning=after.reasoning - before.reasoning,
        calls=after.calls - before.calls,
    )


def per_1000(usage: TokenUsage, turns: int) -> dict[str, float] | None:
    """Tokens per 1,000 turns (None without turns)."""
    if turns <= 0:
        return None
    scale = 1000 / turns
    return {
        "tokens_in": round(usage.prompt * scale, 1),
        "tokens_in_cached": round(usage.cached * scale, 1),
        "tokens_out": round(usage.completion * scale, 1),
        "calls": round(usage.calls * scale, 1),
    }


def turns_of(figures: dict[str, Any]) -> int:
    """The recorded turns the write section decided (its languages' ``turns``)."""
    return sum(int(lang["turns"]) for lang in figures["languages"].values())


def section_module(name: str) -> ModuleType | None:
    """The module of section ``name``, or None when it does not exist (an import error inside
    an existing module is raised: that is a bug, not an absent section)."""
    module_name = f"memharness.bench.cognition_{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise


def build_model(kind: str, ledger: MemoryLedger | None = None) -> LLM:
    """The adapter of ``--llm``: the offline rules, or the OpenAI-compatible adapter of the
    settings (the provider forced to openai, so a missing key is an error, not a silent
    fallback to the rules), recording into ``ledger``."""
    from workers.adapters.llm_offline import OfflineLLM

    if kind == "offline":
        return OfflineLLM()
    from config import get_settings
    from workers.adapters import build_llm

    settings = get_settings().model_copy(update={"llm_provider": "openai"})
    return build_llm(settings, ledger=ledger).billed_to(BENCH_TENANT)


def takes_sample(module: ModuleType) -> bool:
    """Whether the section's ``run`` accepts a ``sample``."""
    return "sample" in inspect.signature(module.run).parameters


def run(
    data_dir: Path | None = None,
    *,
    llm: str = "offline",
    sections: Sequence[str] = SECTIONS,
    sample: Sample | None = None,
) -> int:
    data = data_dir or DEFAULT_DATA_DIR
    unknown = [name for name in sections if name not in SECTIONS]
    if unknown or not data.is_dir():
        error = f"unknown sections {unknown}; known: {list(SECTIONS)}" if unknown else ""
        error = error or f"no such directory {data}"
        _log(f"error: {error}")
        print(json.dumps({"error": error}))
        return 2
    kinds = ["offline"] if llm == "offline" else ["offline", llm]
    ledgers = {kind: MemoryLedger() for kind in kinds}
    try:
        models = {kind: build_model(kind, ledgers[kind]) for kind in kinds}
    except ValueError as exc:
        _log(f"error: {exc}")
        print(json.dumps({"error": str(exc)}))
        return 2
    result: dict[str, Any] = {
        "bench": "cognition",
        "data_dir": str(data),
        "llm": llm,
        "models": {kind: model.name for kind, model in models.items()},
        "sections": {},
        "headline": {},
        "sample": sample.as_dict() if sample else None,
    }
    for name in sections:
        module = section_module(name)
        if module is None:
            _log(f"{name}: {NOT_AVAILABLE}")
            result["sections"][name] = {"status": NOT_AVAILABLE}
            continue
        runs: dict[str, Any] = {}
        sampled = sample if sample is not None and takes_sample(module) else None
        if sample is not None and sampled is None:
            _log(f"{name}: takes no sample, runs its whole set")
        extra: dict[str, Any] = {"sample": sampled} if sampled is not None else {}
        for kind, model in models.items():
            _log(f"{name}: running with {model.name}")
            metered = MeteredLLM(model)
            before = ledgers[kind].total()
            began = time.perf_counter()
            figures: dict[str, Any] = module.run(cast(LLM, metered), data, **extra)
            figures["sample"] = sampled.as_dict() if sampled is not None else None
            figures["seconds"] = round(time.perf_counter() - began, 3)
            usage = minus(ledgers[kind].total(), before)
            figures["llm_calls"] = metered.report(usage)
            rates = per_1000(usage, turns_of(figures)) if name == "write" else None
            if rates is not None:
                figures["llm_calls"]["per_1000_turns"] = rates
                headline = figures.setdefault("headline", {})
                headline["tokens_in_per_1000_turns"] = rates["tokens_in"]
                headline["tokens_out_per_1000_turns"] = rates["tokens_out"]
            for key, value in figures.get("headline", {}).items():
                result["headline"][f"{name}.{kind}.{key}"] = value
            runs[kind] = figures
        result["sections"][name] = runs
    print(json.dumps(result, ensure_ascii=False, sort_keys=True))
    return 0


def register_bench(bench: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench cognition``; its own ``func`` overrides the ``bench`` parser's."""
    b = bench.add_parser(
        "cognition",
        help="precision and recall of the cognition's decisions on labeled sets, rules vs model",
    )
    b.add_argument("--data-dir", default=None, help=f"labeled sets (default {DEFAULT_DATA_DIR})")
    b.add_argument(
        "--llm",
        choices=["offline", "openai"],
        default="offline",
        help="openai: also run the configured OpenAI-compatible model (MEMHARNESS_LLM_*)",
    )
    b.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, of {','.join(SECTIONS)}",
    )
    b.add_argument(
        "--limit",
        type=int,
        default=None,
        help="write and compress: at most N items per language, drawn with --seed",
    )
    b.add_argument("--seed", type=int, default=0, help="the sample's seed (with --limit)")
    b.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    try:
        sample = Sample(args.limit, args.seed) if args.limit is not None else None
    except ValueError as exc:
        _log(f"error: {exc}")
        print(json.dumps({"error": str(exc)}))
        return 2
    return run(
        Path(args.data_dir) if args.data_dir else None,
        llm=args.llm,
        sections=[s.strip() for s in args.sections.split(",") if s.strip()],
        sample=sample,
    )
