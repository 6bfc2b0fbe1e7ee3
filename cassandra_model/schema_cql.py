"""A table definition back to CQL DDL that `load_schema_from_cql` reads: the schema topic's payload.

Workers rebuild the exact decoding view (ids, key layout, types, dropped columns) from the text with
the same parser users give their DDL files to, so there is one reader of table definitions.
"""

from __future__ import annotations

from cassandra_model.cql_types import CqlType, UserType
from cassandra_model.table_schema import ClusteringOrder, ColumnKind, SchemaCatalog, TableSchema


def quote(name: str) -> str:
    """Always-quoted identifier: exact case and any character survive the round trip."""
    return '"' + name.replace('"', '""') + '"'


def _user_types(t: CqlType, found: dict[tuple[str, str], UserType]) -> None:
    """Every user type `t` refers to, innermost first (CREATE TYPE order)."""
    for udt in t.user_types():
        found.setdefault((udt.keyspace, udt.name), udt)


def table_to_cql(table: TableSchema) -> str:
    """CREATE TYPE (as needed), CREATE TABLE ... WITH ID, then ALTER ... DROP ... USING TIMESTAMP."""
    ks = quote(table.keyspace)
    name = f"{ks}.{quote(table.table)}"
    udts: dict[tuple[str, str], UserType] = {}
    for column in table.all_columns():
        _user_types(column.type, udts)
    for dropped in table.dropped_columns.values():
        _user_types(dropped.type, udts)
    statements = [
        f"CREATE TYPE {ks}.{quote(u.name)} ("
        + ", ".join(f"{quote(f)} {t.cql()}" for f, t in zip(u.field_names, u.field_types, strict=True))
        + ")"
        for u in udts.values()
    ]
    columns = []
    readd: list[str] = []
    for column in table.all_columns():
        dropped = table.dropped_columns.get(column.name)
        declared = dropped.type if dropped is not None else column.type
        if dropped is not None:
            readd.append(f"ALTER TABLE {name} ADD {quote(column.name)} {column.type.cql()}"
                         + (" STATIC" if column.kind == ColumnKind.STATIC else ""))  # fmt: skip
        static = " STATIC" if column.kind == ColumnKind.STATIC else ""
        columns.append(f"{quote(column.name)} {declared.cql()}{static}")
    for dropped in table.dropped_columns.values():
        if table.column(dropped.name) is None:
            static = " STATIC" if dropped.kind == ColumnKind.STATIC else ""
            columns.append(f"{quote(dropped.name)} {dropped.type.cql()}{static}")
    partition = ", ".join(quote(c.name) for c in table.partition_key)
    key = ", ".join([f"({partition})", *(quote(c.name) for c in table.clustering)])
    options = [
        f"ID = {table.table_id}",
        f"cdc = {str(table.cdc).lower()}",
        f"gc_grace_seconds = {table.gc_grace_seconds}",
    ]
    if table.clustering:
        order = ", ".join(
            f"{quote(c.name)} {'DESC' if c.clustering_order == ClusteringOrder.DESC else 'ASC'}"
            for c in table.clustering
        )
        options.insert(0, f"CLUSTERING ORDER BY ({order})")
    statements.append(
        f"CREATE TABLE {name} ({', '.join(columns)}, PRIMARY KEY ({key})) WITH {' AND '.join(options)}"
    )
    statements += [
        f"ALTER TABLE {name} DROP {quote(d.name)} USING TIMESTAMP {d.dropped_time}"
        for d in table.dropped_columns.values()
    ]
    statements += readd
    return ";\n".join(statements) + ";\n"


def catalog_from_cql(texts: list[str]) -> SchemaCatalog:
    """A catalog from several tables' DDL (user types may repeat across them)."""
    from cassandra_model.ddl_parser import load_schema_from_cql

    catalog = SchemaCatalog()
    for text in texts:
        catalog.merge(load_schema_from_cql(text))
    return catalog
