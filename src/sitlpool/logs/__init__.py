"""Flight logs as evidence: read, summarise, compare, draw and keep ArduPilot DataFlash logs.

Reading (streamed, bounded memory, any size; a truncated or corrupt log is read up to the
damage and ``end`` says where it stopped)::

    from sitlpool import logs
    logs.summary("00000001.BIN")          # phases, modes, altitude, speeds, events, MSG texts...
    logs.fields("00000001.BIN", ["CTUN.Alt", "BAT.Volt"], t0=10, t1=60, max_points=500)
    logs.messages("00000001.BIN", "MODE", offset=0, limit=100)
    logs.compare("a.BIN", "b.BIN")         # summaries side by side, differences named
    logs.picture("00000001.BIN", ["CTUN.Alt"])  # PNG bytes
    logs.LogReader(path).describe()        # types, fields and units

Keeping (``<data_dir>/logs``, budget ``SITLPOOL_LOG_BUDGET_MB``, default 2000)::

    store = logs.LogStore(data_dir)
    store.collect(sitl_dir / "logs", {"session": ..., "label": ..., "instance": 41, ...})
    store.list(session=..., label=..., since="2h"); store.get(id); store.path(id)
    store.pin(id); store.unpin(id); store.prune()
    store.resolve(name, allow_paths=False)   # agents: ids only; people/scripts: ids or paths
    logs.current_log(sitl_dir / "logs")     # the log a running SITL is writing (readable live)

Times in summaries, series and pages are log times: seconds since the autopilot booted
(``TimeUS / 1e6``), as a log viewer shows them, so an answer can quote the log.
"""

from .compare import compare, compare_summaries
from .draw import picture
from .reader import LogError, LogFormat, LogReader, NotALog, ReadEnd, TimeRangeError, UnknownField
from .series import MAX_PAGE, MAX_POINTS, Downsampler, fields, messages
from .sitldir import current_log, sitl_logs
from .store import (
    DEFAULT_BUDGET_MB,
    LogMoveError,
    LogRecord,
    LogStore,
    UnknownLog,
    budget_from_env,
)
from .summary import summary

__all__ = [
    "DEFAULT_BUDGET_MB",
    "MAX_PAGE",
    "MAX_POINTS",
    "Downsampler",
    "LogError",
    "LogFormat",
    "LogMoveError",
    "LogReader",
    "LogRecord",
    "LogStore",
    "NotALog",
    "ReadEnd",
    "TimeRangeError",
    "UnknownField",
    "UnknownLog",
    "budget_from_env",
    "compare",
    "compare_summaries",
    "current_log",
    "fields",
    "messages",
    "picture",
    "sitl_logs",
    "summary",
]
