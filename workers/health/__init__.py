"""Operations in the workers: golden-query runs, the health report, the metrics endpoint and
its scrape-time gauges."""
