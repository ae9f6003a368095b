"""PostgreSQL: the connection pool and the migrations (Alembic, plain SQL revisions)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from config import Settings

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def open_pool(settings: Settings, *, name: str = "memharness") -> ConnectionPool:
    """An autocommit pool: each statement of the write path is its own short transaction;
    code that needs several statements opens ``conn.transaction()`` explicitly. Timestamps a
    datetime cannot hold load clamped (``workers.db.instants``): one such row never fails a
    read of the rows around it."""
    from workers.db.instants import clamp_timestamps

    pool = ConnectionPool(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        timeout=settings.db_pool_timeout_s,
        kwargs={"autocommit": True, "application_name": name},
        name=name,
        configure=clamp_timestamps,
        open=False,
    )
    pool.open(wait=True, timeout=15.0)
    return pool


def sqlalchemy_url(database_url: str) -> str:
    """Alembic speaks SQLAlchemy URLs; point it at the psycopg 3 driver."""
    params = conninfo_to_dict(database_url)
    user = params.get("user", "postgres")
    password = params.get("password")
    auth = f"{user}:{password}" if password else str(user)
    host = params.get("host", "127.0.0.1")
    port = params.get("port", 5432)
    dbname = params.get("dbname", "postgres")
    return f"postgresql+psycopg://{auth}@{host}:{port}/{dbname}"


def ensure_database(database_url: str) -> bool:
    """Create the database when it does not exist yet. Returns True when it was created."""
    params = conninfo_to_dict(database_url)
    dbname = str(params.get("dbname", "postgres"))
    admin = make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if exists:
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        except psycopg.errors.DuplicateDatabase:
            return False  # created concurrently by another process
    log.info("created database %s", dbname)
    return True


def alembic_config(database_url: str) -> Config:
    # Alembic (and SQLAlchemy under it) loads only for a migration, not in every agent.
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(database_url).replace("%", "%%"))
    return cfg


def migrate(database_url: str, revision: str = "head") -> None:
    """Create the database if needed and apply every migration up to ``revision``."""
    from alembic import command

    ensure_database(database_url)
    command.upgrade(alembic_config(database_url), revision)


def drop_database(database_url: str) -> None:
    params = conninfo_to_dict(database_url)
    dbname = str(params.get("dbname"))
    admin = make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )
