"""Adapters that implement the ports of ``pipelines.ports``, chosen by ``Settings``."""

from __future__ import annotations

from config import Settings
from pipelines.index.vectors import Embedder, VectorIndex
from workers.ledger import BillableLLM, UsageLedger


def build_llm(settings: Settings, *, ledger: UsageLedger | None = None) -> BillableLLM:
    """The adapter of the settings; ``ledger`` receives the usage of every model answer
    (a process with a pool passes ``PostgresLedger``)."""
    if not settings.llm_is_remote:
        from workers.adapters.llm_offline import OfflineLLM

        return OfflineLLM()
    from workers.adapters.llm_openai import OpenAILLM

    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
    if not key:
        raise ValueError("MEMHARNESS_LLM_PROVIDER=openai needs MEMHARNESS_LLM_API_KEY")
    return OpenAILLM(
        base_url=settings.llm_base_url,
        api_key=key,
        model_fast=settings.llm_model_fast,
        model_deep=settings.llm_model_deep,
        timeout_s=settings.llm_timeout_s,
        temperature_summary=settings.llm_temperature_summary,
        max_tokens=settings.llm_max_tokens,
        send_schema=settings.llm_send_schema,
        ledger=ledger,
    )


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "hashing":
        from workers.adapters.embed_hashing import HashingEmbedder

        return HashingEmbedder(settings.embed_dim)
    if settings.embedder == "openai":
        from workers.adapters.embed_openai import OpenAIEmbedder

        if not settings.embed_base_url:
            raise ValueError("MEMHARNESS_EMBEDDER=openai needs MEMHARNESS_EMBED_BASE_URL")
        key = settings.embed_api_key.get_secret_value() if settings.embed_api_key else "none"
        return OpenAIEmbedder(
            base_url=settings.embed_base_url,
            api_key=key,
            model=settings.embed_model,
            dim=settings.embed_dim,
            timeout_s=settings.llm_timeout_s,
        )
    if settings.embedder == "e5":
        from workers.adapters.embed_e5 import E5Embedder

        return E5Embedder(threads=settings.embed_threads)
    from workers.adapters.embed_st import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(settings.embed_model)


def build_code_embedder(settings: Settings, embedder: Embedder) -> Embedder | None:
    """The embedder of code memories' code vector (None: code vectors are off)."""
    if settings.code_embedder == "off":
        return None
    from workers.adapters.embed_code import IdentifierEmbedder

    return IdentifierEmbedder(embedder)


def build_vector_index(settings: Settings) -> VectorIndex:
    if settings.store_is_embedded and settings.embedded_engine == "edge":
        from workers.adapters.vector_edge import EdgeIndex

        return EdgeIndex(settings.qdrant_path, search_threads=settings.edge_search_threads)
    from workers.adapters.vector_qdrant import QdrantIndex

    key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
    if not settings.store_is_embedded:
        return QdrantIndex(url=settings.qdrant_url, api_key=key)
    return QdrantIndex(path=settings.qdrant_path)
