"""The success line Celery logs for a task keeps counts and hides everything else."""

from __future__ import annotations

import logging

import pytest

from workers.logs import TRACE_LOGGER, HideTaskResults, loggable_result


@pytest.mark.parametrize(
    ("returned", "logged"),
    [
        ("3", "3"),
        ("None", "None"),
        ("{'claimed': 2, 'stored': 2, 'more': False, 'next_retry_s': None}",
         "{'claimed': 2, 'stored': 2, 'more': False, 'next_retry_s': None}"),
        ("[{'memory_id': 'x', 'content': 'the launch code is 0000'}]", "<not logged: list of 1>"),
        ("{'context': {'text': 'the launch code is 0000'}}", "<not logged: dict of 1>"),
        ("{'the launch code is 0000': 1}", "<not logged: dict of 1>"),
        ("'pong'", "<not logged: str of 4>"),
        ("[{'content': 'cut short at resultrepr_maxsize...", "<not logged>"),
    ],
)  # fmt: skip
def test_only_counts_reach_the_log(returned: str, logged: str) -> None:
    assert loggable_result(returned) == logged


def test_the_filter_rewrites_celerys_success_line(caplog: pytest.LogCaptureFixture) -> None:
    from celery.app.trace import LOG_SUCCESS

    logger = logging.getLogger(TRACE_LOGGER)
    hide = HideTaskResults()
    logger.addFilter(hide)
    try:
        context = {"id": "abc", "name": "memory.recall.search", "runtime": 0.01,
                   "return_value": "[{'content': 'ZEBRAFISH-7 runs at 02:00'}]"}  # fmt: skip
        with caplog.at_level(logging.INFO, logger=TRACE_LOGGER):
            logger.info(LOG_SUCCESS, context, extra={"data": context})
    finally:
        logger.removeFilter(hide)
    [record] = caplog.records
    assert "ZEBRAFISH" not in record.getMessage() and "ZEBRAFISH" not in str(record.data)  # type: ignore[attr-defined]
    assert "memory.recall.search[abc] succeeded" in record.getMessage()
