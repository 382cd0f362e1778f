"""flywheel: versioned columnar tables for ML training data.

    import flywheel, numpy as np
    t = flywheel.Table.create("/data/ds", {"x": "int64", "emb": "float32[16]", "name": "string?"})
    t.append({"x": np.arange(3), "emb": np.zeros((3, 16), np.float32), "name": ["a", None, "c"]})
    for batch in t.scan(columns=["x", "emb"]):
        ...

See docs/python.md for data conventions and errors. The C++ core lives in the
private extension module ``flywheel._core``.
"""

from ._core import CommitConflict
from ._convert import ListArray
from .table import Table
from .batch import Batch  # take() and Loader batches: dicts that Arrow readers take (docs/arrow.md)
from .loader import Loader  # deterministic, elastic, resumable batches (docs/loader.md)
from . import transforms  # C++ transforms for the loader: DecodeImage, PackTokens (docs/transforms.md)
from . import replay  # flywheel.replay: experience replay, in process and over gRPC (docs/replay.md)
from . import envs  # flywheel.envs: parallel environments, EnvPool (docs/envs.md)
from .interop import ingest, read_parquet, parquet_schema  # files in (docs/ingest.md)
from . import catalog  # flywheel.catalog: datasets, runs, lineage (docs/catalog.md)
from . import trace  # flywheel.trace: spans as Chrome trace JSON (docs/observability.md)
from .catalog import run, Catalog

__version__ = "0.1.0"


def dump_waits() -> str:
    """Who waits on what in this process: blocked replay calls with the rate
    limiter's explanation, loader next() waiting for a batch (docs/observability.md)."""
    from . import _core
    return _core.dump_waits()


def install_hang_diagnostics(watchdog_seconds: float = -1) -> None:
    """Makes SIGUSR1 print dump_waits() to stderr (and append it to
    FLYWHEEL_HANG_DUMP when set), and starts a watchdog that prints it once
    when calls wait and nothing progressed for ``watchdog_seconds`` (default:
    FLYWHEEL_WATCHDOG_SECONDS, else 300; 0 = no watchdog). Idempotent."""
    from . import _core
    _core.install_hang_diagnostics(float(watchdog_seconds))


def metrics_text() -> str:
    """The process's flywheel metrics (loader, replay, tables) in Prometheus text format."""
    from . import _core
    return _core.metrics_text()

__all__ = ["Table", "Batch", "Loader", "Catalog", "run", "catalog", "trace", "dump_waits", "install_hang_diagnostics", "ListArray", "ingest", "read_parquet", "parquet_schema", "metrics_text",
           "CommitConflict", "__version__"]
