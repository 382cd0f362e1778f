"""flywheel.catalog: datasets, runs and lineage (docs/catalog.md).

A catalog is a directory (SQLite inside) or a PostgreSQL database. When one is
configured (``FLYWHEEL_CATALOG`` or ``flywheel.catalog.use(...)``), every
flywheel operation that reads or writes tables records a run: ingest,
export, compaction, table writes, and Loader iteration (the table versions
with the loader's seed and positions, so the catalog can say which samples
trained a checkpoint). Table names ``"namespace/table"`` resolve through it.

Example::

    import flywheel
    with flywheel.run("train-resnet", params={"lr": 0.1}) as run:
        loader = flywheel.Loader("images/train", batch_size=256, seed=0)
        for batch in loader:
            ...
        torch.save(model.state_dict(), "ckpt/model.pt")
        run.log_artifact("ckpt/model.pt")   # hash + the samples behind it

    cat = flywheel.catalog.Catalog()          # FLYWHEEL_CATALOG
    cat.samples("ckpt/model.pt")              # table versions, seed, positions
    cat.upstream("ckpt/model.pt")             # every run and dataset behind it

Without a catalog, ``flywheel.run`` records nothing and its ``id`` is None,
so the same script runs with and without one.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _core

__all__ = ["Catalog", "Run", "run", "current_run", "default_catalog", "use"]

PathLike = Union[str, "os.PathLike[str]"]


def _node_text(node: Any) -> str:
    """A lineage node from a Table (its version), "ns/t@v", "artifact:PATH",
    "file:PATH" or a path (an artifact)."""
    if hasattr(node, "path") and hasattr(node, "version") and not isinstance(node, (str, os.PathLike)):
        cat = default_catalog()
        if cat is None:
            raise ValueError("a Table node needs a catalog to name it")
        return cat._c.mirror(str(node.path), int(node.version))
    text = os.fspath(node)
    if text.startswith(("artifact:", "file:")):
        return text
    if os.path.isdir(os.path.join(text, "_versions")):
        cat = default_catalog()
        if cat is not None:
            return cat._c.dataset_of(text)  # a table directory: its dataset, every version
    if os.path.isfile(text):
        return "artifact:" + os.path.abspath(text)
    return text


class Catalog:
    """A handle on a catalog.

    location: a directory (created if absent; SQLite ``catalog.db`` inside,
      tables named ``ns/t`` live under it), ``postgresql://...`` or
      ``pg:<libpq conninfo>``. Default: ``FLYWHEEL_CATALOG``.
    principal: who acts (default ``FLYWHEEL_USER``, ``FLYWHEEL_TOKEN_FILE``,
      else the OS user). warehouse: where named tables are created (default:
      the catalog directory). openlineage_file / openlineage_url: where
      OpenLineage events go (defaults: ``<dir>/openlineage.jsonl`` for a
      directory catalog, ``FLYWHEEL_OPENLINEAGE_FILE`` / ``_URL``).
    """

    def __init__(self, location: Optional[PathLike] = None, *, principal: Optional[str] = None,
                 warehouse: Optional[PathLike] = None, openlineage_file: Optional[PathLike] = None,
                 openlineage_url: Optional[str] = None):
        loc = os.fspath(location) if location is not None else os.environ.get("FLYWHEEL_CATALOG", "")
        if not loc:
            raise ValueError("no catalog location: pass one or set FLYWHEEL_CATALOG")
        self.location = loc
        self._c = _core.Catalog(loc, principal or "", os.fspath(warehouse) if warehouse else "",
                                os.fspath(openlineage_file) if openlineage_file else "", openlineage_url or "")

    @property
    def principal(self) -> str:
        return self._c.principal

    @property
    def backend(self) -> str:
        """"sqlite" or "postgresql"."""
        return self._c.backend

    @property
    def warehouse(self) -> str:
        return self._c.warehouse

    def schema_version(self) -> int:
        return self._c.schema_version()

    def __repr__(self) -> str:
        return f"Catalog({self.location!r}, backend={self.backend!r}, principal={self.principal!r})"

    # ------------------------------------------------------------ datasets
    @staticmethod
    def _ds(t: Tuple[str, str, str, int]) -> Dict[str, Any]:
        return {"name": t[0], "namespace": t[1], "uri": t[2], "created_ms": t[3]}

    def datasets(self, namespace: Optional[str] = None) -> List[Dict[str, Any]]:
        """Registered datasets: [{"name", "namespace", "uri", "created_ms"}]."""
        return [self._ds(t) for t in self._c.list_datasets(namespace or "")]

    def dataset(self, name: str) -> Dict[str, Any]:
        """One dataset; FileNotFoundError when the catalog has no such name."""
        return self._ds(self._c.get_dataset(name))

    def register(self, name: str, path: PathLike) -> Dict[str, Any]:
        """Names the table at ``path`` ``name`` ("namespace/table")."""
        return self._ds(self._c.register_dataset(name, os.fspath(path)))

    def resolve(self, name_or_path: PathLike, create: bool = False) -> str:
        """The table location a dataset name or path argument stands for."""
        return self._c.resolve_argument(os.fspath(name_or_path), bool(create))

    # ------------------------------------------------------------- lineage
    def upstream(self, node: Any, depth: int = 64) -> Dict[str, Any]:
        """Runs and data ``node`` was made from (a Table, "ns/t@v", a logged
        checkpoint's path, "file:PATH"), breadth-first:
        {"start", "direction", "runs": [{run_id, job, job_type, state,
        principal, started_ms, ended_ms, depth, params, inputs, outputs}]}."""
        return json.loads(self._c.upstream(_node_text(node), int(depth)))

    def downstream(self, node: Any, depth: int = 64) -> Dict[str, Any]:
        """Runs and data made from ``node`` (same form as :meth:`upstream`)."""
        return json.loads(self._c.downstream(_node_text(node), int(depth)))

    def samples(self, checkpoint: PathLike) -> Dict[str, Any]:
        """The samples recorded behind a checkpoint logged with
        :meth:`Run.log_artifact`: {"artifact", "run_id", "sources": [{"dataset",
        "version", "detail": {"state", "start", "rank", "world_size"}}]}; the
        loader states say which epochs and positions of which order."""
        text = os.fspath(checkpoint)
        if not text.startswith("artifact:"):
            text = "artifact:" + os.path.abspath(text)
        return json.loads(self._c.samples(text))

    def get_run(self, run_id: str) -> Dict[str, Any]:
        """One run with its inputs and outputs."""
        return json.loads(self._c.get_run(run_id))["runs"][0]

    def run(self, job: str, params: Optional[Mapping[str, Any]] = None, job_type: str = "train") -> "Run":
        """A run of ``job`` on this catalog (see :func:`flywheel.run`)."""
        return Run(self, job, params, job_type)

    # ----------------------------------------------------------- governance
    def grant(self, privilege: str, object: str, principal: str) -> None:
        """Gives ``principal`` READ, WRITE or ADMIN on ``object`` ("*" = the
        catalog, a namespace, or "ns/t"); inherited downward. Needs ADMIN on
        the object; PermissionError otherwise."""
        self._c.grant(principal, object, privilege)

    def revoke(self, privilege: str, object: str, principal: str) -> None:
        """Takes a grant back (FileNotFoundError when there is none)."""
        self._c.revoke(principal, object, privilege)

    def grants(self, object: Optional[str] = None) -> List[Dict[str, Any]]:
        """[{"principal", "object", "privilege", "granted_by", "granted_ms"}]."""
        return [dict(zip(("principal", "object", "privilege", "granted_by", "granted_ms"), g))
                for g in self._c.grants(object or "")]

    def allowed(self, principal: str, object: str, privilege: str) -> bool:
        """Whether ``principal`` holds ``privilege`` on ``object`` (no audit)."""
        return self._c.has_privilege(principal, object, privilege)

    def set_admin(self, principal: str, admin: bool = True) -> None:
        """Makes ``principal`` a catalog admin, or not (admins only)."""
        self._c.set_admin(principal, bool(admin))

    def set_clearances(self, principal: str, tags: List[str]) -> None:
        """The column tags ``principal`` may read unmasked (admins only)."""
        self._c.set_clearances(principal, list(tags))

    def whoami(self) -> Dict[str, Any]:
        """{"principal", "admin", "clearances"} of the acting principal."""
        name, admin, clear = self._c.principal_info(self.principal)
        return {"principal": name, "admin": admin, "clearances": list(clear)}

    def tag_column(self, dataset: str, column: str, tag: str) -> None:
        """Tags a column (e.g. "pii"); readers not cleared for the tag get it
        masked or refused (:meth:`set_mask`). Needs ADMIN on the dataset."""
        self._c.tag_column(dataset, column, tag, False)

    def untag_column(self, dataset: str, column: str, tag: str) -> None:
        self._c.tag_column(dataset, column, tag, True)

    def column_tags(self, dataset: str) -> Dict[str, List[str]]:
        return dict(self._c.column_tags(dataset))

    def set_mask(self, dataset: str, mode: str) -> None:
        """How tagged columns reach uncleared readers: "hash" (default: a
        salted hash, stable per dataset, so joins and counts still work),
        "null", or "refuse" (reading the column raises PermissionError)."""
        self._c.set_mask_policy(dataset, mode)

    def read_policy(self, dataset: str) -> Dict[str, Any]:
        """What the acting principal may see of ``dataset``: {"mode",
        "columns": {column: [uncleared tags]}} (empty: everything)."""
        mode, cols, _salt = self._c.read_policy(dataset)
        return {"mode": mode, "columns": {c: list(t) for c, t in cols}}

    def audit_log(self, after: int = 0, limit: int = 1000) -> List[Dict[str, Any]]:
        """Audit events after sequence number ``after``."""
        out = []
        for e in self._c.audit_events(int(after), int(limit)):
            e = dict(e)
            e["detail"] = json.loads(e["detail"])
            out.append(e)
        return out

    def verify_audit(self) -> Dict[str, Any]:
        """Recomputes the audit hash chain: {"ok", "events", "first_bad_seq",
        "problem", "head_hash"}."""
        return dict(self._c.verify_audit())


# --------------------------------------------------------------- defaults
_lock = threading.Lock()
_default: Optional[Catalog] = None
_default_key: Optional[str] = None
_explicit = False


def use(catalog: Optional[Union[Catalog, PathLike]]) -> Optional[Catalog]:
    """Makes ``catalog`` (a Catalog or a location) this process's catalog;
    None turns recording off (also when FLYWHEEL_CATALOG is set)."""
    global _default, _default_key, _explicit
    with _lock:
        if catalog is not None and not isinstance(catalog, Catalog):
            catalog = Catalog(catalog)
        _default, _default_key, _explicit = catalog, None, True
        return catalog


def default_catalog() -> Optional[Catalog]:
    """The process's catalog: the one :func:`use` set, else FLYWHEEL_CATALOG's
    (opened once), else None."""
    global _default, _default_key
    with _lock:
        if _explicit:
            return _default
        loc = os.environ.get("FLYWHEEL_CATALOG", "")
        if not loc:
            return None
        if _default is None or _default_key != loc:
            _default, _default_key = Catalog(loc), loc
        return _default


_current: contextvars.ContextVar[Optional["Run"]] = contextvars.ContextVar("flywheel_run", default=None)


def current_run() -> Optional["Run"]:
    """The innermost active ``flywheel.run`` of this thread/task, or None."""
    return _current.get()


class Run:
    """A run in the catalog: a context manager that records START on entry
    and COMPLETE (or FAIL with the exception) on exit, with every table
    version read or written and every Loader iterated inside it."""

    def __init__(self, catalog: Optional[Catalog], job: str, params: Optional[Mapping[str, Any]] = None,
                 job_type: str = "train"):
        if not job:
            raise ValueError("job: the job name is empty")
        self.catalog = catalog
        self.job = job
        self.job_type = job_type
        self.params = dict(params or {})
        self.id: Optional[str] = None
        self._token = None
        self._reads: Dict[Tuple[str, int], None] = {}
        self._loaders: List[Tuple[Any, Dict[str, Any]]] = []
        self._finished = False

    def __enter__(self) -> "Run":
        if self.catalog is not None:
            self.id = self.catalog._c.start_run(self.job, self.job_type, json.dumps(self.params, default=str))
        self._token = _current.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        if exc_type is KeyboardInterrupt:
            self.finish("ABORT", "interrupted")
        elif exc is not None:
            self.finish("FAIL", f"{exc_type.__name__}: {exc}")
        else:
            self.finish("COMPLETE")

    # -------------------------------------------------------- recording
    def _edge(self, inp: bool, node: str, detail: Optional[Mapping[str, Any]] = None) -> None:
        if self.id is not None:
            self.catalog._c.add_edge(self.id, inp, node, json.dumps(dict(detail or {}), default=str))

    def add_input(self, node: Any, detail: Optional[Mapping[str, Any]] = None) -> None:
        """Records something the run consumed: a Table (its version), "ns/t@v",
        "file:PATH", or a path (a file)."""
        if self.id is not None:
            self._edge(True, self._as_node(node), detail)

    def add_output(self, node: Any, detail: Optional[Mapping[str, Any]] = None) -> None:
        """Records something the run produced (same forms as :meth:`add_input`)."""
        if self.id is not None:
            self._edge(False, self._as_node(node), detail)

    def _as_node(self, node: Any) -> str:
        if isinstance(node, (str, os.PathLike)) and os.path.exists(os.fspath(node)) \
                and not os.path.isdir(os.fspath(node)):
            return "file:" + os.path.abspath(os.fspath(node))
        return _node_text(node)

    def use_artifact(self, path: PathLike) -> None:
        """Records that the run started from a checkpoint logged by another
        run, with its content hash (``lineage samples`` then includes the
        samples behind exactly that checkpoint, even if the path was logged
        again later)."""
        if self.id is None:
            return
        p = os.path.abspath(os.fspath(path))
        self.catalog._c.add_edge(self.id, True, "artifact:" + p, "{}", _core.Catalog.hash_file(p))

    def log_artifact(self, path: PathLike) -> Dict[str, str]:
        """Records a checkpoint (content hash) as an output, with the samples
        every Loader in this run has handed out so far. Returns {"path", "hash"}."""
        p = os.path.abspath(os.fspath(path))
        if self.id is None:
            return {"path": p, "hash": ""}
        name, digest = self.catalog._c.log_artifact(self.id, p, json.dumps(self._samples()))
        return {"path": name, "hash": digest}

    def _samples(self) -> List[Dict[str, Any]]:
        out = []
        for loader, start in self._loaders:
            state = loader.state_dict()
            for t in state.get("tables", []):
                node = self.catalog._c.mirror(t["uri"], int(t["version"]))
                name, _, version = node.rpartition("@")
                out.append({"dataset": name, "version": int(version), "state": state, "start": start,
                            "rank": loader.rank, "world_size": loader.world_size})
        return out

    def _note_read(self, uri: str, version: int) -> None:
        self._reads[(uri, int(version))] = None

    def _note_loader(self, loader: Any) -> None:
        # A loader first seen here starts its record at its state now.
        if not any(l is loader for l, _ in self._loaders):
            self._loaders.append((loader, loader.state_dict()))

    def finish(self, state: str = "COMPLETE", error: str = "") -> None:
        """Ends the run (the context manager calls this)."""
        if self._finished:
            return
        self._finished = True
        if self.id is None:
            return
        c = self.catalog._c
        try:
            for (uri, v) in self._reads:
                c.add_edge(self.id, True, c.mirror(uri, v), "{}")
            for s in self._samples():
                detail = {k: s[k] for k in ("state", "start", "rank", "world_size")}
                c.add_edge(self.id, True, f"{s['dataset']}@{s['version']}", json.dumps(detail))
        finally:
            c.finish_run(self.id, state, error)


def run(job: str, params: Optional[Mapping[str, Any]] = None, job_type: str = "train",
        catalog: Optional[Catalog] = None) -> Run:
    """``with flywheel.run("train-resnet", params={...}) as run:`` records a run
    of ``job`` in ``catalog`` (default: :func:`default_catalog`); without a
    catalog it records nothing."""
    return Run(catalog if catalog is not None else default_catalog(), job, params, job_type)


# -------------------------------------------------- hooks for flywheel itself
def _authorize(arg: PathLike, privilege: str, action: str, create: bool = False) -> str:
    """A table argument (a dataset name through the process's catalog, else a
    path), checked for ``privilege`` and audited as ``action`` when a catalog
    is configured. PermissionError names the principal, dataset and privilege."""
    text = os.fspath(arg)
    cat = default_catalog()
    if cat is None:
        return text
    return cat._c.authorize_table(text, privilege, action, create)


def _policy_for(uris: List[str]) -> Optional[Any]:
    """The catalog's column rules for the acting principal over the tables at
    ``uris`` (a ``_core.ReadGuard``: refusals and masking, applied in C++ by
    Table reads and the Loader), or None when nothing is guarded (or there is
    no catalog). docs/catalog.md, "Column tags and masking"."""
    cat = default_catalog()
    if cat is None:
        return None
    guard = cat._c.read_guard([os.fspath(u) for u in uris])
    return None if guard.empty else guard


def _note_read(uri: str, version: int) -> None:
    r = _current.get()
    if r is not None:
        r._note_read(uri, version)


def _note_loader(loader: Any) -> None:
    r = _current.get()
    if r is not None:
        r._note_loader(loader)


def _record_op(job_type: str, job: str, inputs: List[Any], outputs: List[Any],
               params: Optional[Mapping[str, Any]] = None, detail: Optional[Mapping[str, Mapping]] = None) -> None:
    """An operation flywheel ran (ingest, export, compact): recorded by the
    C++ recorder (recorder.h RecordOperation) as edges of the active run, or
    as a run of its own when none is active. Nodes are "ns/t@v" / "file:PATH"
    texts or (uri, version) pairs of tables."""
    detail = detail or {}
    active = _current.get()
    if active is not None and active.id is None:
        return
    cat = active.catalog if active is not None else default_catalog()
    if cat is None:
        return

    def node(n):
        d = json.dumps(detail.get(str(n), {}), default=str)
        return ("", os.fspath(n[0]), int(n[1]), d) if isinstance(n, tuple) else (n, "", -1, d)

    cat._c.record_operation(active.id if active is not None else "", job_type, job, [node(n) for n in inputs],
                            [node(n) for n in outputs], json.dumps(dict(params or {}), default=str))
