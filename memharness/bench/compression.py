"""``memharness bench compression --data PATH``: what survives L1 and L2 compression.

Data: a LoCoMo-format file (read at run time, never copied). Each turn becomes an L0 memory
``"speaker: text"`` with its session's time as timestamp (turn *i* of a session is *i*
seconds later, so the order survives a stable sort); tenant ``locomo``, task the
conversation, session the session. Image captions are not part of a turn's text.

Protocol
--------
1. Every session is compressed to L1 with the two-stage protocol and the offline adapter
   (groups of :func:`pipelines.compress.plan_groups`: a session, at most a day and 2,000
   raw words), then each session's L1 rows to one L2 row. Ratios are raw words over summary
   words, summed over all rows of a level. Two ways, both reported:

   * **gated** (the headline keys): what the system stores. Each group goes through
     :func:`pipelines.quality.attempt_compression`: compress, sample five statements and
     every rationale, roll back below 85 % fact recall and retry at half the ratio; after
     three failures the group is compressed annotate-only and kept. L2 is built the same
     way on the kept L1 rows.
   * **single pass** (``single_pass``, and ``single_pass_l1_target_X`` for other L1
     targets): one compression at the policy's target ratio, no check.
2. For each QA of categories 1–4, the texts that matter are found by parent pointers: the
   evidence turns (L0), the L1 rows that have an evidence turn among their parents, the L2
   rows built on those. Evidence ids that are ``;``- or space-joined are split; ids that
   match no turn are dropped; a QA left with no evidence is skipped.
3. The gold answer is checked with :func:`pipelines.quality.answer_recoverable` (rule in
   that module's docstring: all content words present, dates contained, the row's timestamp
   counts as a date of the row). A QA is **eligible** when its answer is recoverable from
   the raw evidence turns; many are not (inferences, paraphrases, answers in image
   captions), and compression cannot be blamed for them. ``fact_recall_lN`` is the share of
   eligible QAs still recoverable from the level-N rows. ``answer_recall_raw`` is the share
   of checkable QAs that are eligible, and ``by_category`` splits the gated figures;
   category 2 (temporal) is the most lenient, since a row's timestamp is a date of the row.
4. ``decision_fidelity``: a generated decision set (:func:`decision_sessions`): 200
   templated software-project sessions, each holding 2–4 decisions with their rationale
   among status changes, test outcomes, multi-line debug output, preferences and chatter,
   from a fixed seed. Each session is compressed once to L1 at the policy's target; a
   decision is faithful when all content words of its known rationale are in the summary
   (:func:`pipelines.quality.check_rationale`). The generator's own rationale is used, not
   the classifier's, so a decision the rules fail to recognise counts as lost.
5. ``compress_per_s``: L0 memories through single-pass L1 compression per second of wall
   time (one process, offline adapter; the machine is shared, so expect noise).
   ``gated_s`` is the wall time of the whole gated run, checks and retries included.

The last line of stdout is one JSON object.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memharness.progress import progress
from pipelines.cognition.compress import (
    SummaryDraft,
    compress_group,
    plan_groups,
    sources_from_drafts,
)
from pipelines.cognition.health import CompressionHealth
from pipelines.cognition.levels import DEFAULT_LEVELS, LevelPolicy
from pipelines.cognition.protocol import SourceMemory
from pipelines.cognition.quality import (
    DatedText,
    QualityVerdict,
    TextIndex,
    answer_recoverable,
    attempt_compression,
    check_rationale,
)
from pipelines.records import ID_NAMESPACE, Level
from pipelines.text.words import word_count

CATEGORIES = (1, 2, 3, 4)
_SESSION_RE = re.compile(r"^session_(\d+)$")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_session_time(value: str) -> datetime:
    """LoCoMo's ``"1:56 pm on 8 May, 2023"``, read as UTC."""
    return datetime.strptime(" ".join(value.split()), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def conversation_sources(sample: dict[str, Any]) -> dict[str, list[tuple[str, SourceMemory]]]:
    """Per session: (dia_id, L0 memory) in turn order."""
    conversation = sample["conversation"]
    sample_id = str(sample["sample_id"])
    sessions: dict[str, list[tuple[str, SourceMemory]]] = {}
    for key in sorted(
        (k for k in conversation if _SESSION_RE.match(k)), key=lambda k: int(k.split("_")[1])
    ):
        turns = conversation[key]
        stamp = conversation.get(f"{key}_date_time")
        if not turns or not stamp:
            continue
        start = parse_session_time(stamp)
        rows: list[tuple[str, SourceMemory]] = []
        for i, turn in enumerate(turns):
            text = str(turn.get("text", "")).strip()
            if not text:
                continue
            content = f"{turn['speaker']}: {text}"
            rows.append(
                (
                    str(turn["dia_id"]),
                    SourceMemory(
                        id=uuid.uuid5(ID_NAMESPACE, f"locomo\x1f{sample_id}\x1f{turn['dia_id']}"),
                        tenant_id="locomo",
                        task_id=sample_id,
                        session_id=key,
                        timestamp=start + timedelta(seconds=i),
                        content=content,
                        source_words=word_count(content),
                    ),
                )
            )
        sessions[key] = rows
    return sessions


def evidence_ids(raw: Sequence[Any]) -> list[str]:
    ids: list[str] = []
    for item in raw:
        ids.extend(part for part in re.split(r"[;\s]+", str(item)) if part)
    return ids


# -- the generated decision set ------------------------------------------------------------

_TECH = [
    ("PostgreSQL", "MySQL"),
    ("Redis", "Memcached"),
    ("Kafka", "RabbitMQ"),
    ("FastAPI", "Flask"),
    ("gRPC", "REST"),
    ("Terraform", "Pulumi"),
    ("pnpm", "npm"),
    ("ruff", "flake8"),
    ("pytest", "unittest"),
    ("Qdrant", "pgvector"),
]
_COMPONENTS = [
    "the job queue",
    "the session cache",
    "the billing service",
    "the auth module",
    "the event bus",
    "the search index",
    "the deploy pipeline",
    "the metrics exporter",
]
_REASONS = [
    "it gives us transactional enqueue in the same commit as the write",
    "p99 latency has to stay under {n} ms for the checkout flow",
    "the on-call team already runs it in production and knows its failure modes",
    "its licence allows redistribution inside the appliance image",
    "the benchmark showed {n}% lower memory at the same throughput",
    "the old client leaked file descriptors under load in ticket OPS-{n}",
    "it keeps the schema in one place and the migrations reviewable",
    "the vendor ends support for the old version in {n} weeks",
]
_DECISION_TEMPLATES = [
    "We decided to use {tech} for {component} because {reason}.",
    "Going with {tech} instead of {old} for {component}, because {reason}.",
    "Decision: switch {component} from {old} to {tech} since {reason}.",
    "After the review we chose {tech} over {old} for {component} because {reason}.",
]
_FILLER = [
    "ok thanks",
    "sounds good",
    "Status: ATL-{n} is now in review, waiting on Priya.",
    "Ran the integration suite: {n} passed, 2 failed in 41 s.",
    "I prefer short status updates; be detailed only for architecture questions.",
    'Traceback (most recent call last):\n  File "app/jobs.py", line {n}, in run\n'
    "    conn.execute(sql)\npsycopg.OperationalError: server closed the connection",
    "The staging deploy of build {n} finished and the smoke tests are green.",
    "great, let's continue",
    "I moved the flaky test tests/test_auth.py::test_refresh to quarantine for now.",
]


# The decision set in Chinese: templates written for it, the same slots and structure.
_COMPONENTS_ZH = [
    "任务队列",
    "会话缓存",
    "账单服务",
    "认证模块",
    "事件总线",
    "搜索索引",
    "部署流水线",
    "监控导出器",
]
_REASONS_ZH = [
    "它能在写入的同一个事务里入队",
    "结账流程的 p99 延迟必须低于 {n} 毫秒",
    "值班团队已经在生产环境用它，熟悉它的故障模式",
    "它的许可证允许打包进设备镜像",
    "压测显示同样吞吐下内存少用 {n}%",
    "旧客户端在工单 OPS-{n} 里高负载时泄漏文件句柄",
    "表结构集中在一处，迁移脚本方便评审",
    "厂商 {n} 周后停止支持旧版本",
]
_DECISION_TEMPLATES_ZH = [
    "我们决定{component}用 {tech}，因为{reason}。",
    "{component}选用 {tech} 而不是 {old}，原因是{reason}。",
    "决定：{component}从 {old} 切换到 {tech}，因为{reason}。",
    "评审后{component}确定用 {tech} 替代 {old}，由于{reason}。",
]
_FILLER_ZH = [
    "好的，谢谢",
    "没问题",
    "状态：ATL-{n} 已进入评审，等李工看。",
    "跑了集成测试：{n} 个通过，2 个失败，耗时 41 秒。",
    "我喜欢简短的进度汇报，只有架构问题才需要写细节。",
    'Traceback (most recent call last):\n  File "app/jobs.py", line {n}, in run\n'
    "    conn.execute(sql)\npsycopg.OperationalError: server closed the connection",
    "构建 {n} 已部署到预发环境，冒烟测试全部通过。",
    "好，继续",
    "先把不稳定的测试 tests/test_auth.py::test_refresh 隔离了。",
]
_DECISION_LANGUAGES = {
    "en": (_COMPONENTS, _REASONS, _DECISION_TEMPLATES, _FILLER),
    "zh": (_COMPONENTS_ZH, _REASONS_ZH, _DECISION_TEMPLATES_ZH, _FILLER_ZH),
}


def decision_sessions(
    count: int = 200, seed: int = 20240601, lang: str = "en"
) -> list[tuple[list[SourceMemory], list[tuple[str, str]]]]:
    """Sessions of a software project with their known (decision, rationale) pairs."""
    components, reasons, templates, filler = _DECISION_LANGUAGES[lang]
    rng = random.Random(seed)
    start = datetime(2024, 3, 4, 9, 0, tzinfo=UTC)
    sessions: list[tuple[list[SourceMemory], list[tuple[str, str]]]] = []
    for s in range(count):
        when = start + timedelta(days=s)
        texts: list[str] = []
        decisions: list[tuple[str, str]] = []
        for _ in range(rng.randint(2, 4)):
            tech, old = rng.choice(_TECH)
            reason = rng.choice(reasons).format(n=rng.randint(2, 900))
            sentence = rng.choice(templates).format(
                tech=tech, old=old, component=rng.choice(components), reason=reason
            )
            texts.append(sentence)
            decisions.append((sentence, reason))
        texts += [
            rng.choice(filler).format(n=rng.randint(10, 999)) for _ in range(rng.randint(4, 9))
        ]
        rng.shuffle(texts)
        speakers = ("user", "agent")
        rows = [
            SourceMemory(
                id=uuid.uuid5(ID_NAMESPACE, f"decision-set\x1f{seed}\x1f{s}\x1f{i}"),
                tenant_id="bench",
                task_id=f"project-{s % 7}",
                session_id=f"s{s}",
                timestamp=when + timedelta(seconds=i),
                content=f"{speakers[i % 2]}: {text}",
                source_words=word_count(f"{speakers[i % 2]}: {text}"),
            )
            for i, text in enumerate(texts)
        ]
        sessions.append((rows, decisions))
    return sessions


def measure_decision_fidelity(policy: LevelPolicy, lang: str = "en") -> dict[str, float | int]:
    kept = total = 0
    source_words = summary_words = 0
    for rows, decisions in decision_sessions(lang=lang):
        draft = compress_group(rows, Level.L1, policy=policy).draft
        index = TextIndex([DatedText(text=draft.content, anchor=draft.timestamp.date())])
        source_words += draft.source_words
        summary_words += draft.summary_words
        for sentence, rationale in decisions:
            total += 1
            kept += check_rationale(sentence, rationale, index).survived
    return {
        "decision_fidelity": kept / total,
        "decisions": total,
        "decision_set_ratio": source_words / max(1, summary_words),
    }


# -- the run ----------------------------------------------------------------------------------


def _index(rows: Sequence[SourceMemory] | Sequence[SummaryDraft]) -> TextIndex:
    return TextIndex(DatedText(text=r.content, anchor=r.timestamp.date()) for r in rows)


@dataclass
class LevelRun:
    """The rows one way of compressing produced, and what they cost."""

    raw_words: int = 0
    words: dict[Level, int] = field(default_factory=lambda: {Level.L1: 0, Level.L2: 0})
    by_parent: dict[Level, dict[uuid.UUID, list[SummaryDraft]]] = field(
        default_factory=lambda: {Level.L1: {}, Level.L2: {}}
    )
    rows: dict[Level, int] = field(default_factory=lambda: {Level.L1: 0, Level.L2: 0})
    rollbacks: dict[Level, int] = field(default_factory=lambda: {Level.L1: 0, Level.L2: 0})
    annotate_only: dict[Level, int] = field(default_factory=lambda: {Level.L1: 0, Level.L2: 0})
    l1_seconds: float = 0.0
    quality_recalls: list[float] = field(default_factory=list)

    def add(self, level: Level, draft: SummaryDraft) -> None:
        self.words[level] += draft.summary_words
        self.rows[level] += 1
        self.annotate_only[level] += draft.annotate_only
        for parent in draft.parent_ids:
            self.by_parent[level].setdefault(parent, []).append(draft)

    def ratio(self, level: Level) -> float:
        return round(self.raw_words / max(1, self.words[level]), 3)


def _single_pass(sources: list[SourceMemory], policy: LevelPolicy, run: LevelRun) -> None:
    began = time.perf_counter()
    l1 = [
        compress_group(group, Level.L1, policy=policy).draft
        for group in plan_groups(sources, Level.L1, policy)
    ]
    run.l1_seconds += time.perf_counter() - began
    for draft in l1:
        run.add(Level.L1, draft)
    run.add(Level.L2, compress_group(sources_from_drafts(l1), Level.L2, policy=policy).draft)


def _gated(
    group: list[SourceMemory], level: Level, policy: LevelPolicy, run: LevelRun, now: datetime
) -> SummaryDraft:
    """Compress, check, roll back and retry gentler until a summary is kept."""
    health: dict[uuid.UUID, CompressionHealth] = {}
    while True:
        attempt = attempt_compression(group, level, health, now, levels=policy)
        if attempt.report.fact_recall is not None:
            run.quality_recalls.append(attempt.report.fact_recall)
        if attempt.outcome.verdict is QualityVerdict.KEEP:
            run.add(level, attempt.draft)
            return attempt.draft
        run.rollbacks[level] += 1
        health.update({h.memory_id: h for h in attempt.outcome.health})


def _gated_pass(sources: list[SourceMemory], policy: LevelPolicy, run: LevelRun) -> None:
    now = max(s.timestamp for s in sources)
    l1 = [_gated(g, Level.L1, policy, run, now) for g in plan_groups(sources, Level.L1, policy)]
    _gated(sources_from_drafts(l1), Level.L2, policy, run, now)


def _score(
    samples: Sequence[dict[str, Any]], runs: dict[str, LevelRun]
) -> tuple[dict[int, dict[str, int]], dict[str, dict[int, dict[Level, int]]], int]:
    """Per category: QA counts; per run, category and level: QAs still recoverable."""
    per_cat = {c: {"qa": 0, "checkable": 0, "eligible": 0} for c in CATEGORIES}
    kept = {name: {c: {Level.L1: 0, Level.L2: 0} for c in CATEGORIES} for name in runs}
    skipped = 0
    for sample in samples:
        by_dia = {
            dia: memory for rows in conversation_sources(sample).values() for dia, memory in rows
        }
        for qa in sample.get("qa", []):
            category = qa.get("category")
            if category not in CATEGORIES or "answer" not in qa:
                continue
            evidence = [by_dia[e] for e in evidence_ids(qa.get("evidence", [])) if e in by_dia]
            if not evidence:
                skipped += 1
                continue
            per_cat[category]["qa"] += 1
            answer = str(qa["answer"])
            raw = answer_recoverable(answer, _index(evidence))
            per_cat[category]["checkable"] += raw.checkable
            if not raw.recoverable:
                continue
            per_cat[category]["eligible"] += 1
            for name, run in runs.items():
                l1 = {d.id: d for e in evidence for d in run.by_parent[Level.L1].get(e.id, [])}
                l2 = {d.id: d for r in l1 for d in run.by_parent[Level.L2].get(r, [])}
                for level, rows in ((Level.L1, l1), (Level.L2, l2)):
                    if answer_recoverable(answer, _index(list(rows.values()))).recoverable:
                        kept[name][category][level] += 1
    return per_cat, kept, skipped


def run(
    data_path: str | None,
    *,
    l1_ratio: float | None = None,
    limit: int | None = None,
    curve: Sequence[float] = (2.5, 5.0),
    lang: str = "en",
) -> int:
    if not data_path:
        _log("error: --data PATH (a LoCoMo-format JSON file) is required")
        return 2
    path = Path(data_path)
    if not path.is_file():
        _log(f"error: no such file {path}")
        return 2
    samples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    if limit is not None:
        samples = samples[:limit]
    policy = DEFAULT_LEVELS if l1_ratio is None else LevelPolicy(ratio_l1=l1_ratio)
    curve_policies = {
        f"single_pass_l1_target_{target:g}": LevelPolicy(ratio_l1=target)
        for target in curve
        if target != policy.ratio_l1
    }
    runs: dict[str, LevelRun] = {"gated": LevelRun(), "single_pass": LevelRun()}
    runs.update({name: LevelRun() for name in curve_policies})
    l0_count = 0
    gated_seconds = 0.0
    sessions_total = sum(len(conversation_sources(sample)) for sample in samples)
    with progress(f"compressing {len(samples)} conversations", total=sessions_total) as bar:
        for sample in samples:
            sessions = conversation_sources(sample)
            for rows in sessions.values():
                sources = [memory for _, memory in rows]
                l0_count += len(sources)
                for one in runs.values():
                    one.raw_words += sum(s.source_words for s in sources)
                _single_pass(sources, policy, runs["single_pass"])
                for name, other in curve_policies.items():
                    _single_pass(sources, other, runs[name])
                began = time.perf_counter()
                _gated_pass(sources, policy, runs["gated"])
                gated_seconds += time.perf_counter() - began
            bar.advance(len(sessions))
            single = runs["single_pass"]
            bar.note(
                f"{sample.get('sample_id')}: {len(sessions)} sessions; single pass ratio L1 "
                f"{single.ratio(Level.L1):.2f} L2 {single.ratio(Level.L2):.2f}; gated L1 "
                f"{runs['gated'].ratio(Level.L1):.2f}"
            )
        bar.note("scoring the QAs")
        per_cat, kept, skipped = _score(samples, runs)
        bar.note("decision set: generating and compressing")
        decisions = measure_decision_fidelity(policy, lang)
    eligible = sum(s["eligible"] for s in per_cat.values())
    checkable = sum(s["checkable"] for s in per_cat.values())

    def recall(name: str, level: Level) -> float | None:
        return _ratio(sum(kept[name][c][level] for c in CATEGORIES), eligible)

    gated = runs["gated"]
    single = runs["single_pass"]
    result: dict[str, Any] = {
        "fact_recall_l1": recall("gated", Level.L1),
        "fact_recall_l2": recall("gated", Level.L2),
        "compression_ratio_l1": gated.ratio(Level.L1),
        "compression_ratio_l2": gated.ratio(Level.L2),
        "decision_fidelity": round(float(decisions["decision_fidelity"]), 4),
        "compress_per_s": round(l0_count / single.l1_seconds, 1) if single.l1_seconds else None,
        "adapter": "offline",
        "lang": lang,
        "data": path.name,
        "mode": "gated: compress, quality check, roll back and retry at half the ratio, "
        "annotate-only after 3 failures",
        "l1_target_ratio": policy.ratio_l1,
        "l2_target_ratio": policy.ratio_l2,
        "l1_rollbacks": gated.rollbacks[Level.L1],
        "l2_rollbacks": gated.rollbacks[Level.L2],
        "l1_rows": gated.rows[Level.L1],
        "l1_annotate_only_rows": gated.annotate_only[Level.L1],
        "l2_annotate_only_rows": gated.annotate_only[Level.L2],
        "quality_fact_recall_mean": _ratio(sum(gated.quality_recalls), len(gated.quality_recalls)),
        "gated_s": round(gated_seconds, 3),
        "single_pass": {
            "fact_recall_l1": recall("single_pass", Level.L1),
            "fact_recall_l2": recall("single_pass", Level.L2),
            "compression_ratio_l1": single.ratio(Level.L1),
            "compression_ratio_l2": single.ratio(Level.L2),
        },
        **{
            name: {
                "fact_recall_l1": recall(name, Level.L1),
                "compression_ratio_l1": runs[name].ratio(Level.L1),
            }
            for name in curve_policies
        },
        "eligible_qa": eligible,
        "checkable_qa": checkable,
        "answer_recall_raw": _ratio(eligible, checkable),
        "skipped_no_evidence": skipped,
        "by_category": {
            str(c): {
                "eligible": s["eligible"],
                "fact_recall_l1": _ratio(kept["gated"][c][Level.L1], s["eligible"]),
                "fact_recall_l2": _ratio(kept["gated"][c][Level.L2], s["eligible"]),
            }
            for c, s in per_cat.items()
        },
        "decisions": decisions["decisions"],
        "decision_set_ratio_l1": round(float(decisions["decision_set_ratio"]), 3),
        "l0_memories": l0_count,
    }
    print(json.dumps(result, sort_keys=True))
    return 0


def _ratio(numerator: float, denominator: int) -> float | None:
    return round(numerator / denominator, 4) if denominator else None
