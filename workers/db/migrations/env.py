"""Alembic environment: migrations are plain SQL run over SQLAlchemy's psycopg 3 driver."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
url = config.get_main_option("sqlalchemy.url") or ""
if not url:
    raise RuntimeError("sqlalchemy.url is not set; run migrations through `memharness migrate`")


def run_migrations_offline() -> None:
    context.configure(url=url, literal_binds=True, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
