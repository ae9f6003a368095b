"""Operations' pure rules: the signals metrics are made of, golden queries, health verdicts."""
