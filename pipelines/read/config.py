"""The sizes and thresholds of the retrieval pipeline: recall depths, fusion, the rerank
cascade's depths, the priority's scales.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Cormack, Clarke and Büttcher (2009): k = 60 makes RRF robust across very different lists.
RRF_K = 60


class RetrievalConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    dense_limit: int = Field(50, ge=1, le=1000)
    sparse_limit: int = Field(50, ge=1, le=1000)
    temporal_limit: int = Field(20, ge=0, le=1000)
    temporal_window_hours: float = Field(7 * 24, gt=0)
    rrf_k: int = Field(RRF_K, ge=1)
    # Weight of the code list (a question in code's terms, searched against code memories'
    # code vectors) relative to the dense lists' weight: above them, as the code vector is
    # the encoder that reads identifiers; set before the code benchmark was run, not fitted.
    code_weight: float = Field(1.5, ge=0.0)
    local_rerank_limit: int = Field(50, ge=1, le=1000)
    depth_concentrated: int = Field(10, ge=1)
    depth_default: int = Field(20, ge=1)
    depth_dispersed: int = Field(30, ge=1)
    # Share of the top-50's score mass (above the 50th score) held by the top 10: above the
    # first bound the head is clear (10 suffice), below the second it is flat (look at 30).
    concentrated_share: float = Field(0.5, gt=0.0, lt=1.0)
    dispersed_share: float = Field(0.3, gt=0.0, lt=1.0)
    # Local scores live in [0, 1]; a top-50 spanning less than this is flat whatever its shape.
    flat_spread: float = Field(0.05, ge=0.0)
    # Session support: the share of a candidate's local score taken from the best
    # ``session_support_top`` local scores of its session among the candidates (a memory
    # whose neighbours in its session also answer is more likely to answer; Callan 1994's
    # passage score mixed with its document's). One in a session with nothing else recalled
    # keeps its own score at that share, so only the order between sessions moves.
    session_support: float = Field(1 / 3, ge=0.0, lt=1.0)
    session_support_top: int = Field(3, ge=1)
    # A question that names a date ("on 8 May 2023", "3月5日"): a memory stored in that span
    # (a day before it to ``date_slack_days`` after it: people tell of a day afterwards, "last
    # Friday") gains this much local score. Without a date in the question nothing moves.
    date_match_weight: float = Field(0.15, ge=0.0)
    date_slack_days: int = Field(7, ge=0)
    recency_scale_hours: float = Field(48.0, gt=0)
    # The decay model's weight of retention in the priority.
    retention_weight: float = Field(0.05, ge=0.0, le=1.0)
    result_limit: int = Field(50, ge=1, le=1000)


DEFAULT_CONFIG = RetrievalConfig()
