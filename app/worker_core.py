"""Which core runs the worker's per-record path, and its functions.

The native core (the `cdc_native` extension built from native/ by `make setup`, shared with the agent)
reads the table and digest of every raw record of a batch in one call (``raw_event_heads``), so the
replica copies, two of three records at three replicas, are dropped without a Python call per record;
it reads the others into the dicts the merge takes (``decode_raw_event``); it writes JSON change events
(``ChangeJson``, for tables whose columns are all of the common scalar types, see schemas/change_json.py);
it writes and reads the stored bytes of rows of simple cells (``encode_row_value``, ``RowReader``, see
state/store/codec.py); and it merges the common event whole, rows of plain live cells into stored rows
of the same kind, from the stored bytes to the change records (``TableMerge``, see
app/change_processor.py).
The Python functions stay the specification and the fallback: without the extension (`pip install .`
with no Rust toolchain) the worker runs on them, slower, and says so in its log, /health and the
``cdc_worker_native_core`` metric, as the agent does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from schemas import raw_event
from schemas.change_json import NativeEncoder
from state.cell_merge import Cell, Deletion, Liveness
from state.row_state import RowState
from state.store import codec

try:  # built from native/ by `make setup`; absent after a plain `pip install .`
    import cdc_native
except ImportError:  # pragma: no cover - depends on the installation
    cdc_native: Any = None  # type: ignore[no-redef]

#: "native" when an extension with the worker's functions is installed, else "python"
AVAILABLE = (
    "native"
    if cdc_native is not None
    and all(
        hasattr(cdc_native, f)
        for f in (
            "raw_event_heads",
            "decode_raw_event",
            "ChangeJson",
            "encode_row_value",
            "RowReader",
            "TableMerge",
        )
    )
    else "python"
)

#: per raw record value: its table ("keyspace.table") and digest, or None (see raw_event_heads)
HeadsReader = Callable[[Sequence[bytes | None]], list[tuple[str, bytes] | None]]


def change_json(core: str) -> NativeEncoder | None:
    """The native encoder of JSON change events (schemas/change_json.py's ``native``), or None."""
    return cdc_native.ChangeJson if core == "native" else None  # type: ignore[no-any-return]


def table_merge(core: str) -> Callable[..., Any] | None:
    """The native whole-event merge (``ChangeProcessor``'s ``table_merge``), or None."""
    return cdc_native.TableMerge if core == "native" else None  # type: ignore[no-any-return]


def use_row_codec(core: str) -> None:
    """The stored rows' writer and reader of the chosen core, for every store of this process."""
    native = core == "native"
    codec.use_native_row_encoder(cdc_native.encode_row_value if native else None)
    codec.use_native_row_decoder(
        cdc_native.RowReader(RowState, Cell, Liveness, Deletion).decode if native else None
    )


def heads_reader(core: str) -> HeadsReader:
    """``raw_event_heads`` of the chosen core."""
    if core == "native":
        return cdc_native.raw_event_heads  # type: ignore[no-any-return]
    return raw_event.raw_event_heads


def event_reader(core: str) -> raw_event.RawEventReader:
    """``decode_raw_event`` of the chosen core (``raw_event.raw_event_reader``)."""
    return raw_event.raw_event_reader(cdc_native.decode_raw_event if core == "native" else None)
