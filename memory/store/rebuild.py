"""Rebuilding tables so their ids are never reused (INTEGER PRIMARY KEY AUTOINCREMENT), for a migration.

SQLite cannot add AUTOINCREMENT to a table: it is created anew, its rows copied, the old one dropped and the new one
renamed, its indexes made again (SQLite's documented procedure for a schema change). Foreign keys must be off
meanwhile, or dropping `users` would cascade into the tables that reference it; SQLite allows turning them off only
outside a transaction, so this runs as a migration that manages its own (one transaction for all its tables).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence

from sqlite_utils import Database

ID_COLUMN = re.compile(r"(\[id\]|\"id\"|\bid\b)(\s+integer\s+primary\s+key)(?!\s+autoincrement)", re.IGNORECASE)
CREATE = re.compile(r"^\s*create\s+table\s+(if\s+not\s+exists\s+)?(\[[^\]]+\]|\"[^\"]+\"|\w+)", re.IGNORECASE)

Seen = Mapping[str, Sequence[tuple[str, str]]]  # table -> the (table, column)s elsewhere that hold its ids


def never_reuse_ids(db: Database, tables: Seen) -> None:
    """Rebuild each of `tables` (those that exist) with AUTOINCREMENT, in one transaction, every row, index and
    foreign key kept; then seed each table's sequence with the highest id known anywhere (its own rows and the
    columns of other tables that hold its ids), so no id a row still mentions is given again.

    Safe to run twice (a table already rebuilt is left alone). Refuses to run inside a transaction, and rolls back
    everything if the rebuild would break a foreign key that held before.
    """
    conn = db.conn
    if conn.in_transaction:
        raise sqlite3.OperationalError("never_reuse_ids must run outside a transaction (foreign keys go off)")
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        if conn.execute("PRAGMA foreign_keys").fetchone()[0]:
            raise sqlite3.OperationalError("could not turn foreign keys off for the table rebuild")
        conn.execute("BEGIN IMMEDIATE")
        try:
            broken_before = set(conn.execute("PRAGMA foreign_key_check").fetchall())
            for table, seen in tables.items():
                _rebuild(conn, table)
                _seed(conn, table, seen)
            broken = set(conn.execute("PRAGMA foreign_key_check").fetchall()) - broken_before
            if broken:
                raise sqlite3.IntegrityError(f"the rebuild would break foreign keys: {sorted(broken)[:5]}")
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    finally:
        conn.execute("PRAGMA foreign_keys=ON")


def _sql(conn: sqlite3.Connection, table: str) -> str | None:
    row = conn.execute("select sql from sqlite_master where type = 'table' and name = ?", [table]).fetchone()
    return row[0] if row else None


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info([{table}])")]


def _rebuild(conn: sqlite3.Connection, table: str) -> None:
    sql = _sql(conn, table)
    if sql is None or "autoincrement" in sql.lower():
        return  # absent (a trial table in a database without trials) or rebuilt already
    autoincrement, n = ID_COLUMN.subn(r"\1\2 AUTOINCREMENT", sql, count=1)
    if n != 1:
        raise sqlite3.OperationalError(f"table {table} has no 'id integer primary key' column to rebuild")
    temp = f"_rebuild_{table}"
    indexes = [
        r[0]
        for r in conn.execute(
            "select sql from sqlite_master where type = 'index' and tbl_name = ? and sql is not null", [table]
        )
    ]
    columns = ", ".join(f"[{c}]" for c in _columns(conn, table))
    conn.execute(f"drop table if exists [{temp}]")
    conn.execute(CREATE.sub(f"CREATE TABLE [{temp}]", autoincrement, count=1))
    conn.execute(f"insert into [{temp}] ({columns}) select {columns} from [{table}] order by id")
    conn.execute(f"drop table [{table}]")  # its indexes go with it; foreign keys are off, so nothing cascades
    conn.execute(f"alter table [{temp}] rename to [{table}]")
    for index in indexes:
        conn.execute(index)


def _seed(conn: sqlite3.Connection, table: str, seen: Sequence[tuple[str, str]]) -> None:
    """The table's sequence starts above the highest id of its own rows and of every column that holds its ids."""
    if _sql(conn, table) is None:
        return
    highest = conn.execute(f"select coalesce(max(id), 0) from [{table}]").fetchone()[0]
    for other, column in seen:
        if _sql(conn, other) is not None and column in _columns(conn, other):
            highest = max(highest, conn.execute(f"select coalesce(max([{column}]), 0) from [{other}]").fetchone()[0])
    current = conn.execute("select coalesce(max(seq), 0) from sqlite_sequence where name = ?", [table]).fetchone()[0]
    conn.execute("delete from sqlite_sequence where name = ?", [table])
    conn.execute("insert into sqlite_sequence (name, seq) values (?, ?)", [table, max(highest, current)])
