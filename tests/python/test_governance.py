"""Catalog governance end to end: grants gating Table/Loader/export from
Python, column tags with hash/null/refuse masking and clearances, the
hash-chained audit log (and tampering with it), erasure of one key from every
retained version of a dataset and its lineage descendants (CLI), retention
(expire + vacuum keeping tagged versions), and hostile names in grants.

Principals: "alice" opens each fresh catalog first, so she administers it;
"bob" and "carol" start with nothing."""

import json
import os
import re
import sqlite3
import subprocess

import numpy as np
import pytest

import flywheel
from flywheel import catalog as fcat

BIN = os.environ.get("FLYWHEEL_BIN")
if BIN and os.sep in BIN:
    BIN = os.path.abspath(BIN)
needs_cli = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")

ADMIN = "alice"
HASHED = re.compile(r"^h:[0-9a-f]{16}$")


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def isolated(monkeypatch):
    """Restores flywheel.catalog's process-wide default exactly as it was
    (use() changes _default, _default_key and _explicit) and keeps every
    FLYWHEEL_* setting of the environment (catalog, user, token file, event
    sinks) out of the test."""
    for name in ("_default", "_default_key", "_explicit"):
        monkeypatch.setattr(fcat, name, getattr(fcat, name))
    for var in list(os.environ):
        if var.startswith("FLYWHEEL_"):
            monkeypatch.delenv(var, raising=False)
    yield
    fcat.use(None)  # drop the test's catalog now; monkeypatch then restores the originals


@pytest.fixture
def catdir(tmp_path, isolated):
    """A fresh directory catalog, created (and so administered) by alice, who
    is the acting principal when the test starts."""
    d = str(tmp_path / "cat")
    act(d, ADMIN)
    return d


def act(catdir, principal):
    """Makes `principal` the acting principal of this process."""
    return fcat.use(fcat.Catalog(catdir, principal=principal))


def fw(catdir, user, *args, check=True):
    """The CLI as `user` on the catalog at `catdir`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLYWHEEL_")}
    env["FLYWHEEL_USER"] = user
    r = subprocess.run([BIN, "--catalog", catdir, *map(str, args)], capture_output=True, text=True, timeout=60,
                       env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"flywheel {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def events(catdir, action=None):
    log = fcat.Catalog(catdir, principal=ADMIN).audit_log(limit=100000)
    return [e for e in log if action is None or e["action"] == action]


# --------------------------------------------------------------- test data
PEOPLE = {
    "email": ["ann@x.org", "bo@x.org", "ann@x.org", "cy@x.org", "dee@x.org", "bo@x.org"],
    "user_id": np.array([101, 202, 101, 303, 404, 202], np.int64),
    "score": np.array([0.5, 1.5, 2.5, 3.5, 4.5, 5.5], np.float32),
}
PEOPLE_SCHEMA = {"email": "string", "user_id": "int64", "score": "float32"}


def make_people():
    """hr/people (versions 1: create, 2: append PEOPLE), created by the acting principal."""
    t = flywheel.Table.create("hr/people", PEOPLE_SCHEMA)
    t.append(PEOPLE)
    return t


def concat(batches):
    out = {}
    for b in batches:
        for k, v in b.items():
            if isinstance(v, list):
                out.setdefault(k, []).extend(v)
            else:
                out.setdefault(k, []).append(v)
    return {k: (v if not v or not isinstance(v[0], np.ndarray) else np.ma.concatenate(v)) for k, v in out.items()}


def assert_denied(excinfo, principal, obj, privilege):
    msg = str(excinfo.value)
    assert f"'{principal}'" in msg and obj in msg and privilege in msg, msg


# ------------------------------------------------------------ 1. grants
def test_grants_gate_open_loader_export_and_writes(catdir, tmp_path):
    t = make_people()  # alice's handle

    act(catdir, "bob")
    with pytest.raises(PermissionError) as e:
        flywheel.Table.open("hr/people")
    assert_denied(e, "bob", "hr/people", "READ")
    with pytest.raises(PermissionError) as e:
        flywheel.Loader("hr/people", batch_size=2)
    assert_denied(e, "bob", "hr/people", "READ")
    # A handle alice opened does not let bob read through it either.
    out = tmp_path / "denied.parquet"
    with pytest.raises(PermissionError) as e:
        t.to_parquet(str(out))
    assert_denied(e, "bob", "hr/people", "READ")
    assert not out.exists()
    with pytest.raises(PermissionError) as e:
        t.to_dict()
    assert_denied(e, "bob", "hr/people", "READ")

    # bob cannot grant himself anything; nothing is stored.
    bob = fcat.default_catalog()
    before = bob.grants()
    for priv, obj in (("READ", "hr"), ("ADMIN", "hr/people"), ("READ", "*")):
        with pytest.raises(PermissionError) as e:
            bob.grant(priv, obj, "bob")
        assert_denied(e, "bob", "", "ADMIN")
    assert bob.grants() == before
    assert not [g for g in bob.grants() if g["principal"] == "bob"]
    assert bob.allowed("bob", "hr/people", "READ") is False

    # READ on the namespace is inherited by the dataset.
    alice = act(catdir, ADMIN)
    alice.grant("READ", "hr", "bob")
    g = alice.grants("hr")
    assert [(x["principal"], x["object"], x["privilege"], x["granted_by"]) for x in g] == [("bob", "hr", "READ", ADMIN)]

    act(catdir, "bob")
    b = flywheel.Table.open("hr/people")
    assert b.version == 2
    d = b.to_dict()
    assert d["email"] == PEOPLE["email"]
    np.testing.assert_array_equal(d["user_id"], PEOPLE["user_id"])
    np.testing.assert_array_equal(d["score"], PEOPLE["score"])
    scanned = concat(b.scan(batch_rows=4))
    assert scanned["email"] == PEOPLE["email"]
    loaded = concat(flywheel.Loader("hr/people", batch_size=4, shuffle=False))
    np.testing.assert_array_equal(loaded["user_id"], PEOPLE["user_id"])
    assert loaded["email"] == PEOPLE["email"]
    assert b.to_parquet(str(tmp_path / "ok.parquet")) == 6

    with pytest.raises(PermissionError) as e:
        b.append({"email": ["eve@x.org"], "user_id": [505], "score": [6.5]})
    assert_denied(e, "bob", "hr/people", "WRITE")
    assert b.latest_version() == 2
    with pytest.raises(PermissionError):
        b.delete([0])
    assert b.latest_version() == 2

    act(catdir, ADMIN).grant("WRITE", "hr", "bob")
    act(catdir, "bob")
    assert b.append({"email": ["eve@x.org"], "user_id": [505], "score": [6.5]}) == 3
    assert flywheel.Table.open("hr/people").num_rows == 7

    # WRITE implies READ: revoking READ alone leaves bob reading; revoking
    # WRITE too denies him again, also through the handle he already holds.
    alice = act(catdir, ADMIN)
    alice.revoke("READ", "hr", "bob")
    with pytest.raises(FileNotFoundError):
        alice.revoke("READ", "hr", "bob")
    assert alice.allowed("bob", "hr/people", "READ") is True
    alice.revoke("WRITE", "hr", "bob")
    assert alice.allowed("bob", "hr/people", "READ") is False
    assert not [x for x in alice.grants() if x["principal"] == "bob"]

    act(catdir, "bob")
    with pytest.raises(PermissionError) as e:
        flywheel.Table.open("hr/people")
    assert_denied(e, "bob", "hr/people", "READ")
    with pytest.raises(PermissionError):
        list(b.scan())
    with pytest.raises(PermissionError):
        b.take([0])


# ------------------------------------------------------------ 2. masking
def _people_tagged(catdir):
    make_people()
    alice = fcat.default_catalog()
    alice.tag_column("hr/people", "email", "pii")
    alice.tag_column("hr/people", "user_id", "pii")
    alice.grant("READ", "hr", "bob")
    assert alice.column_tags("hr/people") == {"email": ["pii"], "user_id": ["pii"]}


def _check_hashed(d, rows):
    """`d` is PEOPLE's rows `rows` as an uncleared reader gets them in hash mode."""
    src_email = [PEOPLE["email"][i] for i in rows]
    src_uid = PEOPLE["user_id"][rows]
    assert len(d["email"]) == len(rows)
    assert all(isinstance(v, str) and HASHED.match(v) for v in d["email"]), d["email"]
    assert not set(d["email"]) & set(PEOPLE["email"])
    uid = np.asarray(d["user_id"])
    assert uid.dtype == np.int64
    assert not np.isin(uid, PEOPLE["user_id"]).any(), uid
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (d["email"][i] == d["email"][j]) == (src_email[i] == src_email[j])
            assert (uid[i] == uid[j]) == (src_uid[i] == src_uid[j])
    np.testing.assert_array_equal(d["score"], PEOPLE["score"][rows])


def test_masking_hash_null_refuse_and_clearances(catdir, tmp_path):
    _people_tagged(catdir)
    all_rows = list(range(6))

    bob = act(catdir, "bob")
    assert bob.read_policy("hr/people") == {"mode": "hash", "columns": {"email": ["pii"], "user_id": ["pii"]}}
    t = flywheel.Table.open("hr/people")
    d = t.to_dict()
    _check_hashed(d, all_rows)
    # The same value hashes the same through every read path and handle.
    _check_hashed(concat(t.scan(batch_rows=4)), all_rows)
    assert concat(t.scan(batch_rows=4))["email"] == d["email"]
    tk = t.take([3, 0, 2])
    _check_hashed(tk, [3, 0, 2])
    assert tk["email"] == [d["email"][3], d["email"][0], d["email"][2]]
    np.testing.assert_array_equal(tk["user_id"], d["user_id"][[3, 0, 2]])
    loaded = concat(flywheel.Loader("hr/people", batch_size=4, shuffle=False))
    assert loaded["email"] == d["email"]
    np.testing.assert_array_equal(loaded["user_id"], d["user_id"])
    np.testing.assert_array_equal(loaded["score"], PEOPLE["score"])
    d2 = flywheel.Table.open("hr/people").to_dict()
    assert d2["email"] == d["email"]
    np.testing.assert_array_equal(d2["user_id"], d["user_id"])

    # Exports are never masked: tagged columns are refused, the rest go.
    with pytest.raises(PermissionError) as e:
        t.to_parquet(str(tmp_path / "all.parquet"))
    assert "email" in str(e.value) and "user_id" in str(e.value) and "'bob'" in str(e.value)
    assert not (tmp_path / "all.parquet").exists()
    with pytest.raises(PermissionError):
        t.to_parquet(str(tmp_path / "uid.parquet"), columns=["user_id", "score"])
    assert t.to_parquet(str(tmp_path / "score.parquet"), columns=["score"]) == 6

    # bob cannot change the policy or clear himself.
    with pytest.raises(PermissionError):
        bob.set_mask("hr/people", "hash")
    with pytest.raises(PermissionError):
        bob.set_clearances("bob", ["pii"])
    with pytest.raises(PermissionError):
        bob.untag_column("hr/people", "email", "pii")

    # null: masked columns come back null, with nothing of the originals underneath.
    act(catdir, ADMIN).set_mask("hr/people", "null")
    act(catdir, "bob")
    for d in (flywheel.Table.open("hr/people").to_dict(),
              concat(flywheel.Loader("hr/people", batch_size=4, shuffle=False)),
              flywheel.Table.open("hr/people").take([1, 4])):
        n = len(d["score"])
        assert d["email"] == [None] * n
        uid = d["user_id"]
        assert isinstance(uid, np.ma.MaskedArray) and np.ma.getmaskarray(uid).all()
        assert not np.isin(uid.data, PEOPLE["user_id"]).any() and (uid.data == 0).all()
        assert not isinstance(d["score"], np.ma.MaskedArray) or not np.ma.getmaskarray(d["score"]).any()
    np.testing.assert_array_equal(flywheel.Table.open("hr/people").to_dict()["score"], PEOPLE["score"])

    # refuse: asking for a tagged column is an error naming it; others are fine.
    act(catdir, ADMIN).set_mask("hr/people", "refuse")
    act(catdir, "bob")
    t = flywheel.Table.open("hr/people")
    with pytest.raises(PermissionError) as e:
        t.to_dict()
    assert re.search(r"'(email|user_id)'", str(e.value)) and "'bob'" in str(e.value), str(e.value)
    with pytest.raises(PermissionError) as e:
        t.take([0], columns=["user_id"])
    assert "'user_id'" in str(e.value)
    with pytest.raises(PermissionError) as e:
        t.scan(columns=["score", "email"])
    assert "'email'" in str(e.value)
    with pytest.raises(PermissionError):
        flywheel.Loader("hr/people", batch_size=4)
    got = concat(t.scan(columns=["score"]))
    assert list(got) == ["score"]
    np.testing.assert_array_equal(got["score"], PEOPLE["score"])
    got = concat(flywheel.Loader("hr/people", batch_size=4, shuffle=False, columns=["score"]))
    np.testing.assert_array_equal(got["score"], PEOPLE["score"])

    # Cleared for pii, bob reads the originals (a new handle: the policy is
    # looked up once per handle / loader), and may export them.
    act(catdir, ADMIN).set_clearances("bob", ["pii"])
    bob = act(catdir, "bob")
    assert bob.whoami() == {"principal": "bob", "admin": False, "clearances": ["pii"]}
    assert bob.read_policy("hr/people")["columns"] == {}
    d = flywheel.Table.open("hr/people").to_dict()
    assert d["email"] == PEOPLE["email"]
    np.testing.assert_array_equal(d["user_id"], PEOPLE["user_id"])
    loaded = concat(flywheel.Loader("hr/people", batch_size=4, shuffle=False))
    assert loaded["email"] == PEOPLE["email"]
    np.testing.assert_array_equal(loaded["user_id"], PEOPLE["user_id"])
    assert flywheel.Table.open("hr/people").to_parquet(str(tmp_path / "cleared.parquet")) == 6


# --------------------------------------------------------------- 3. audit
def _flag(e):
    return (e["principal"], e["action"], e["object"], bool(e["detail"].get("denied", False)))


@needs_cli
def test_audit_records_decisions_and_detects_tampering(catdir):
    t = make_people()                                                       # create, commit, write, commit
    act(catdir, "bob")
    with pytest.raises(PermissionError):
        flywheel.Table.open("hr/people")                                    # open (denied)
    act(catdir, ADMIN).grant("READ", "hr", "bob")                           # grant
    act(catdir, "bob")
    b = flywheel.Table.open("hr/people")                                    # open
    b.to_dict()                                                             # read
    with pytest.raises(PermissionError):
        b.append({"email": ["x"], "user_id": [1], "score": [0.0]})          # write (denied)
    act(catdir, ADMIN).revoke("READ", "hr", "bob")                          # revoke
    bob = act(catdir, "bob")
    with pytest.raises(PermissionError):
        bob.revoke("ADMIN", "hr/people", ADMIN)                             # revoke (denied)
    del t

    log = events(catdir)
    assert [_flag(e) for e in log] == [
        (ADMIN, "create", "hr/people", False),
        (ADMIN, "register_first_sight", "hr/people", False),
        (ADMIN, "commit", "hr/people", False),
        (ADMIN, "write", "hr/people", False),
        (ADMIN, "commit", "hr/people", False),
        ("bob", "open", "hr/people", True),
        (ADMIN, "grant", "hr", False),
        ("bob", "open", "hr/people", False),
        ("bob", "read", "hr/people", False),
        ("bob", "write", "hr/people", True),
        (ADMIN, "revoke", "hr", False),
        ("bob", "revoke", "hr/people", True),
    ]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert log[1]["detail"]["uri"].endswith("/hr/people")  # registered on first sight, after the create
    assert log[5]["detail"]["privilege"] == "READ"
    assert log[6]["detail"] == {"to": "bob", "grant": "READ", "privilege": "ADMIN"}
    assert log[9]["detail"]["privilege"] == "WRITE"
    assert log[10]["detail"]["from"] == "bob" and log[10]["detail"]["revoke"] == "READ"
    assert [e["detail"]["version"] for e in log if e["action"] == "commit"] == [1, 2]
    assert log[0]["prev_hash"] == ""
    for prev, e in zip(log, log[1:]):
        assert e["prev_hash"] == prev["hash"]

    cat = act(catdir, ADMIN)
    v = cat.verify_audit()
    assert v == {"ok": True, "events": len(log), "first_bad_seq": 0, "problem": "", "head_hash": log[-1]["hash"],
                 "anchored": True}
    r = fw(catdir, ADMIN, "audit", "verify")
    assert r.returncode == 0 and "intact" in r.stdout and log[-1]["hash"] in r.stdout
    j = json.loads(fw(catdir, "bob", "audit", "verify", "--json").stdout)
    assert j["ok"] is True and j["events"] == len(log) and j["head_hash"] == log[-1]["hash"]

    db = os.path.join(catdir, "catalog.db")

    def sql(statement, *params):
        con = sqlite3.connect(db, timeout=30)
        try:
            rows = con.execute(statement, params).fetchall()
            con.commit()
            return rows
        finally:
            con.close()

    # Edit one event's detail: caught at that event.
    (orig,) = sql("SELECT detail FROM audit WHERE seq = 3")
    sql("UPDATE audit SET detail = ? WHERE seq = 3", json.dumps({"privilege": "WRITE", "note": "nothing to see"}))
    v = cat.verify_audit()
    assert v["ok"] is False and v["first_bad_seq"] == 3 and "edited" in v["problem"], v
    r = fw(catdir, ADMIN, "audit", "verify", check=False)
    assert r.returncode == 5 and "TAMPERED" in r.stdout, (r.returncode, r.stdout, r.stderr)
    j = json.loads(fw(catdir, ADMIN, "audit", "verify", "--json", check=False).stdout)
    assert j["ok"] is False and j["first_bad_seq"] == 3

    # Put it back byte for byte: intact again.
    sql("UPDATE audit SET detail = ? WHERE seq = 3", orig[0])
    assert cat.verify_audit()["ok"] is True
    assert fw(catdir, ADMIN, "audit", "verify", check=False).returncode == 0

    # Dropping the newest event leaves a valid (shorter) chain: the anchor
    # file beside the database (<catalog>/audit.head) shows it.
    anchor = cat.verify_audit()["head_hash"]
    assert open(os.path.join(catdir, "audit.head")).read().split() == [str(len(log)), anchor]
    sql("DELETE FROM audit WHERE seq = ?", len(log))
    v = cat.verify_audit()
    assert v["ok"] is False and v["first_bad_seq"] == len(log) and "removed from the end" in v["problem"], v
    assert fw(catdir, ADMIN, "audit", "verify", check=False).returncode == 5

    # Deleting an event in the middle breaks the chain there.
    sql("DELETE FROM audit WHERE seq = 5")
    v = cat.verify_audit()
    assert v["ok"] is False and v["first_bad_seq"] == 5 and "missing" in v["problem"], v
    r = fw(catdir, ADMIN, "audit", "verify", check=False)
    assert r.returncode == 5 and "TAMPERED" in r.stdout


# ------------------------------------------------------- 4-6. erasure, retention
KEY = 42
SECRET = b"SECRET42"  # only user 42's payloads contain it: its bytes must leave every file


def _rows(ids, batch):
    return {"user_id": np.array(ids, np.int64),
            "payload": [f"SECRET42-{batch}{i}" if u == KEY else f"p-{batch}{i}-{u}" for i, u in enumerate(ids)]}


def make_events():
    """raw/events with 5 versions (create, append, append, delete, append):
    user 42's rows in versions 2, 3 and 5, one of them deleted at version 4;
    returns the number of user-42 rows physically written."""
    t = flywheel.Table.create("raw/events", {"user_id": "int64", "payload": "string"})
    t.append(_rows([1, 42, 2, 42, 3], "a"))              # v2
    t.append(_rows([4, 42, 5], "b"))                     # v3
    assert t.delete([1, 2]) == 2                         # v4: one row of 42, the row of user 2
    t.append(_rows([42, 6, 42, 7], "c"))                 # v5
    assert [v["operation"] for v in t.versions()] == ["create", "append", "append", "delete", "append"]
    return 2 + 1 + 2


def derive_features():
    """feat/events made from raw/events inside a transform run (lineage links
    them), keeping user_id: 3 versions (create, append, append)."""
    with flywheel.run("derive", job_type="transform"):
        src = flywheel.Table.open("raw/events").to_dict()
        f = flywheel.Table.create("feat/events", {"user_id": "int64", "payload": "string", "n": "int64"})
        half = len(src["payload"]) // 2
        for lo, hi in ((0, half), (half, len(src["payload"]))):
            f.append({"user_id": src["user_id"][lo:hi], "payload": [p.upper() for p in src["payload"][lo:hi]],
                      "n": np.arange(lo, hi, dtype=np.int64)})
    return f


def snapshot(name):
    """{version: to_dict()} of every retained version."""
    t = flywheel.Table.open(name)
    return {v["version"]: flywheel.Table.open(name, version=v["version"]).to_dict() for v in t.versions()}


def without_key(d):
    keep = np.asarray(d["user_id"]) != KEY
    return {k: ([x for x, m in zip(v, keep) if m] if isinstance(v, list) else np.asarray(v)[keep]) for k, v in d.items()}


def assert_same(a, b, what):
    assert a.keys() == b.keys(), what
    for k in a:
        if isinstance(a[k], list):
            assert a[k] == b[k], (what, k)
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{what} {k}")


def files_of(path):
    """{relative path: (size, mtime_ns)} of every file under a table but the
    erase key index (_erase_index/: Bloom filters a dry run may build too)."""
    out = {}
    for d, _, names in os.walk(path):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, path)
            if not rel.startswith("_erase_index" + os.sep):
                st = os.stat(p)
                out[rel] = (st.st_size, st.st_mtime_ns)
    return out


def files_holding_secret(path):
    hits = []
    for d, _, names in os.walk(path):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                if SECRET in f.read():
                    hits.append(os.path.relpath(os.path.join(d, n), path))
    return hits


def _setup_erasure(catdir):
    written = make_events()
    derive_features()
    cat = fcat.default_catalog()
    down = cat.downstream("raw/events")
    assert any(o["name"] == "feat/events" for r in down["runs"] for o in r["outputs"]), down
    uris = {n: cat.dataset(n)["uri"] for n in ("raw/events", "feat/events")}
    snaps = {n: snapshot(n) for n in uris}
    return written, uris, snaps


def _unchanged(uris, snaps, files):
    for n, uri in uris.items():
        now = snapshot(n)
        assert now.keys() == snaps[n].keys(), n
        for v in now:
            assert_same(now[v], snaps[n][v], f"{n}@{v}")
        assert files_of(uri) == files[n], n


@needs_cli
def test_erase_key_from_every_version_and_downstream(catdir):
    written, uris, snaps = _setup_erasure(catdir)
    counts = {n: {v: int((np.asarray(d["user_id"]) == KEY).sum()) for v, d in s.items()} for n, s in snaps.items()}
    assert counts["raw/events"] == {1: 0, 2: 2, 3: 3, 4: 2, 5: 4}
    assert counts["feat/events"] == {1: 0, 2: 2, 3: 4}
    for uri in uris.values():
        assert files_holding_secret(uri), "the test data should put user 42's payload in the files"
    files = {n: files_of(u) for n, u in uris.items()}
    args = ("erase", "--dataset", "raw/events", "--where", f"user_id={KEY}", "--downstream", "--json")

    def check_counts(report):
        by = {d["dataset"]: d for d in report["datasets"]}
        assert set(by) == {"raw/events", "feat/events"}, report
        for n in by:
            assert "skipped" not in by[n], by[n]
            got = {int(v): c for v, c in by[n]["rows_by_version"].items() if c}
            assert got == {v: c for v, c in counts[n].items() if c}, (n, by[n]["rows_by_version"])
        assert by["raw/events"]["rows_erased"] == written
        assert by["feat/events"]["rows_erased"] == 4
        return by

    # --dry-run reports the same counts and changes nothing.
    by = check_counts(json.loads(fw(catdir, ADMIN, *args, "--dry-run").stdout))
    assert all(not d["files_deleted"] for d in by.values())
    _unchanged(uris, snaps, files)
    assert not events(catdir, "erase")

    by = check_counts(json.loads(fw(catdir, ADMIN, *args).stdout))
    for n, uri in uris.items():
        assert by[n]["files_deleted"], by[n]
        for f in by[n]["files_deleted"]:
            assert not os.path.exists(os.path.join(uri, f)), (n, f)
        for f in by[n]["files_written"]:
            assert os.path.exists(os.path.join(uri, f)), (n, f)
        assert files_holding_secret(uri) == [], n
        now = snapshot(n)
        assert now.keys() == snaps[n].keys(), n
        for v, d in now.items():
            assert not (np.asarray(d["user_id"]) == KEY).any(), (n, v)
            assert_same(d, without_key(snaps[n][v]), f"{n}@{v}")
        loaded = concat(flywheel.Loader(n, batch_size=3, shuffle=False))
        assert not (np.asarray(loaded["user_id"]) == KEY).any()

    (ev,) = events(catdir, "erase")
    assert ev["principal"] == ADMIN and ev["object"] == "raw/events"
    assert ev["detail"]["where"] == f"user_id={KEY}"
    assert sorted(d["dataset"] for d in ev["detail"]["datasets"]) == ["feat/events", "raw/events"]
    assert fcat.default_catalog().verify_audit()["ok"] is True

    # Nothing left to erase.
    again = json.loads(fw(catdir, ADMIN, *args).stdout)
    assert [d["rows_erased"] for d in again["datasets"]] == [0, 0]


@needs_cli
def test_erase_needs_admin(catdir):
    _, uris, snaps = _setup_erasure(catdir)
    files = {n: files_of(u) for n, u in uris.items()}
    act(catdir, ADMIN).grant("WRITE", "raw", "bob")
    for extra in ((), ("--dry-run",), ("--downstream",)):
        r = fw(catdir, "bob", "erase", "--dataset", "raw/events", "--where", "user_id=42", *extra, check=False)
        assert r.returncode == 6, (extra, r.returncode, r.stdout, r.stderr)
        assert "'bob'" in r.stderr and "ADMIN" in r.stderr and "raw/events" in r.stderr, r.stderr
    _unchanged(uris, snaps, files)
    assert not events(catdir, "erase")
    denied = [e for e in events(catdir) if e["principal"] == "bob" and e["detail"].get("denied")]
    assert {e["action"] for e in denied} == {"erase_check", "erase_dry_run"}
    assert {e["object"] for e in denied} == {"raw/events"}


@needs_cli
def test_erase_downstream_denied_on_a_descendant_changes_nothing(catdir):
    """bob administers raw/events but not the derived feat/events: an erase
    with --downstream he is refused (exit 6) must not have erased anything
    (or, at the very least, the erasure it did must be in the audit log)."""
    _, uris, snaps = _setup_erasure(catdir)
    files = {n: files_of(u) for n, u in uris.items()}
    act(catdir, ADMIN).grant("ADMIN", "raw/events", "bob")
    r = fw(catdir, "bob", "erase", "--dataset", "raw/events", "--where", "user_id=42", "--downstream", check=False)
    assert r.returncode == 6 and "feat/events" in r.stderr, (r.returncode, r.stderr)
    raw_now = snapshot("raw/events")
    erased = any((np.asarray(d["user_id"]) == KEY).sum() != (np.asarray(snaps["raw/events"][v]["user_id"]) == KEY).sum()
                 for v, d in raw_now.items())
    assert not erased, (
        "regression: `erase --downstream` by a principal lacking ADMIN on a descendant exits 6 (PermissionDenied) but has "
        "already erased the key from raw/events (rows and files gone), and no 'erase' audit event records it "
        f"(erase events: {events(catdir, 'erase')}); EraseEverywhere authorizes each dataset only just before "
        "erasing it and audits only at the end (src/flywheel/catalog/recorder.cc, EraseEverywhere loop)")
    _unchanged(uris, snaps, files)


@needs_cli
def test_retention_keeps_newest_and_tagged_versions(catdir):
    make_events()
    snaps = snapshot("raw/events")
    uri = fcat.default_catalog().dataset("raw/events")["uri"]
    flywheel.Table.open("raw/events").tag("golden", 2)

    r = fw(catdir, "bob", "retention", "set", "raw/events", "--keep-versions", "1", check=False)
    assert r.returncode == 6 and "'bob'" in r.stderr
    assert fw(catdir, ADMIN, "retention", "list").stdout == ""
    fw(catdir, ADMIN, "retention", "set", "raw/events", "--keep-versions", "2")
    assert fw(catdir, ADMIN, "retention", "list").stdout.split() == ["raw/events", "keep_versions=2", "keep_days=0"]

    files = files_of(uri)
    out = fw(catdir, ADMIN, "retention", "apply", "--dry-run").stdout
    assert out.strip() == "raw/events: would expire 2 version(s) 1,3", out
    assert [v["version"] for v in flywheel.Table.open("raw/events").versions()] == [1, 2, 3, 4, 5]
    assert files_of(uri) == files
    assert not events(catdir, "retention_applied")

    out = fw(catdir, ADMIN, "retention", "apply", "raw/events", "--grace", "0").stdout
    assert out.startswith("raw/events: expired 2 version(s) 1,3, deleted "), out
    t = flywheel.Table.open("raw/events")
    assert [v["version"] for v in t.versions()] == [2, 4, 5]
    assert t.tags() == {"golden": 2}
    for v in (2, 4, 5):
        assert_same(flywheel.Table.open("raw/events", version=v).to_dict(), snaps[v], f"v{v}")
    assert_same(flywheel.Table.open("raw/events", tag="golden").to_dict(), snaps[2], "golden")
    for v in (1, 3):
        with pytest.raises(FileNotFoundError):
            flywheel.Table.open("raw/events", version=v)
    (ev,) = events(catdir, "retention_applied")
    assert ev["object"] == "raw/events" and ev["principal"] == ADMIN and ev["detail"]["expired"] == [1, 3]

    # Applying again expires nothing more.
    out = fw(catdir, ADMIN, "retention", "apply", "--grace", "0").stdout
    assert out.startswith("raw/events: expired 0 version(s)"), out


def test_python_version_management_needs_write(catdir):
    """Table.expire / vacuum / tag change what versions exist; the CLI's
    `table expire|vacuum|tag` require WRITE, and so must the Python API."""
    make_events()
    act(catdir, ADMIN).grant("READ", "raw", "carol")
    act(catdir, "carol")
    t = flywheel.Table.open("raw/events")
    outcomes = {}
    for name, call in (("tag", lambda: t.tag("mine", 2)), ("expire", lambda: t.expire(keep_last=1)),
                       ("vacuum", lambda: t.vacuum(grace_seconds=0))):
        try:
            call()
            outcomes[name] = "allowed"
        except PermissionError:
            outcomes[name] = "PermissionError"
    act(catdir, ADMIN)
    left = [v["version"] for v in flywheel.Table.open("raw/events").versions()]
    assert outcomes == {"expire": "PermissionError", "tag": "PermissionError", "vacuum": "PermissionError"}, (
        f"regression: a principal with only READ changed raw/events' versions through the Python API ({outcomes}; "
        f"versions left: {left}): Table.expire/vacuum/tag/untag in python/flywheel/table.py never call "
        "self._write_check() (the CLI's table expire/vacuum/tag check WRITE via OpenNamedTable)")


# ---------------------------------------------------------------- 7. names
HOSTILE = [
    "q'uote\"s;ns",                                    # a namespace
    "ns\"; DROP TABLE grants; --/t'1 OR '1'='1",       # a dataset
    "données/表格 ☃;",                                  # unicode
    "*",
]


@needs_cli
def test_hostile_names_in_grants_round_trip(catdir, tmp_path):
    cat = fcat.default_catalog()
    who = "o'brien\"; DROP TABLE principals; --"
    for i, obj in enumerate(HOSTILE):
        cat.grant(["READ", "WRITE", "ADMIN", "READ"][i], obj, who)
    for i, obj in enumerate(HOSTILE):
        g = cat.grants(obj)
        assert [(x["principal"], x["object"], x["privilege"], x["granted_by"]) for x in g] == \
            [(who, obj, ["READ", "WRITE", "ADMIN", "READ"][i], ADMIN)], (obj, g)
    assert cat.allowed(who, "q'uote\"s;ns/child;'", "READ") is True        # inherited from the namespace
    assert cat.allowed(who, "q'uote\"s;ns/child;'", "WRITE") is False
    assert cat.allowed(who, "données/表格 ☃;", "ADMIN") is True
    assert cat.allowed(who, "données/autre", "WRITE") is False
    assert cat.allowed(who, "other/x", "READ") is True                      # "*"
    listed = fw(catdir, ADMIN, "grants", HOSTILE[1]).stdout
    assert listed.split("\t")[:3] == [HOSTILE[1], who, "WRITE"], listed
    assert HOSTILE[2] in fw(catdir, ADMIN, "grants").stdout
    for i, obj in enumerate(HOSTILE):
        cat.revoke(["READ", "WRITE", "ADMIN", "READ"][i], obj, who)
        assert cat.grants(obj) == []
    # The owner grant and the principals are all still there.
    assert cat.whoami()["admin"] is True
    assert cat.audit_log()[-1]["object"] == "*" and cat.verify_audit()["ok"] is True

    # "*" names the whole catalog: it is no namespace, and no table name.
    t = flywheel.Table.create(str(tmp_path / "plain"), {"x": "int64"})
    for name in ("*/x", "a/*"):
        with pytest.raises(ValueError):
            cat.register(name, t.path)
        with pytest.raises(ValueError):
            cat.grant("READ", name, "bob")
    assert not [d for d in cat.datasets() if "*" in d["name"]]
    for bad in ("a/b/c", "", "a/", "/b", "../x", "a\\b/c"):
        with pytest.raises(ValueError):
            cat.grant("READ", bad, "bob") if "/" in bad else cat.register(bad, t.path)


# ------------------------------------------- one rule through every read path
# The catalog's column rules live in C++ (catalog/read_policy.h); every way to
# read a table applies that one implementation. Each reader below gets the
# same table, and what it returns is checked against the documented masked
# values (docs/catalog.md, "Column tags and masking"), computed here from the
# dataset's salt with hashlib.
WIDE = {
    "email": ["ann@x.org", None, "ann@x.org", "cy@x.org"],
    "uid": np.array([101, -5, 101, 303], np.int64),
    "small": np.array([7, 200, 7, 9], np.uint8),
    "blob": [b"\x00\x01", b"zz", b"\x00\x01", b""],
    "emb": np.arange(8, dtype=np.float32).reshape(4, 2),
    "toks": [[1, 2], [], [3], [4, 5, 6]],
    "score": np.array([0.5, 1.5, 2.5, 3.5], np.float32),
}
WIDE_SCHEMA = {"email": "string?", "uid": "int64", "small": "uint8", "blob": "binary", "emb": "float32[2]",
               "toks": "list<int32>", "score": "float32"}
TAGGED = ["email", "uid", "small", "blob", "emb", "toks"]
READERS = ["cpp", "python", "cli", "loader", "arrow"]


def _expected(mode, salt):
    """WIDE as an uncleared reader gets it in `mode`, as plain Python values."""
    import hashlib

    def digest(v: bytes) -> bytes:
        return hashlib.sha256(salt.encode() + b"\x00" + v).digest()

    def as_int(v, dtype):
        return int(np.array(int.from_bytes(digest(str(v).encode())[:8], "little"), np.uint64).astype(dtype))

    out = {c: _plain(v) for c, v in WIDE.items()}
    for c in TAGGED:
        out[c] = [None] * 4
    if mode == "hash":
        out["email"] = [None if v is None else "h:" + digest(v.encode()).hex()[:16] for v in WIDE["email"]]
        out["uid"] = [as_int(v, np.int64) for v in WIDE["uid"].tolist()]
        out["small"] = [as_int(v, np.uint8) for v in WIDE["small"].tolist()]
        out["blob"] = [digest(v)[:8] for v in WIDE["blob"]]
    return out


def _plain(v):
    """A column as a list of Python values (None for nulls, lists for rows of tensors and lists)."""
    from flywheel._convert import ListArray
    if isinstance(v, ListArray):
        mask = v.mask if v.mask is not None else np.zeros(len(v.offsets) - 1, bool)
        return [None if mask[i] else v.values[v.offsets[i]:v.offsets[i + 1]].tolist() for i in range(len(mask))]
    if isinstance(v, np.ndarray):
        m = np.ma.getmaskarray(v).reshape(len(v), -1).any(axis=1)
        rows = np.asarray(v).tolist()
        return [None if m[i] else rows[i] for i in range(len(rows))]
    return list(v)


def _read(reader, catdir, columns=None):
    """hr/wide as bob reads it through `reader`: {column: [values]}; PermissionError when refused."""
    names = list(columns or [])
    if reader == "cpp":
        # The C++ API through the bindings alone: Table::Take with the
        # ReadGuard, no flywheel.Table in between.
        from flywheel import _core
        c = _core.Catalog(catdir, principal="bob")
        uri = c.authorize_table("hr/wide", "READ", "read", False)
        guard = c.read_guard([uri])
        guard.check_read(names)
        from flywheel._convert import batch_from_core
        got = _core.Table.open(uri).take(np.arange(4, dtype=np.int64), names, guard).to_dict()
        return {k: _plain(v) for k, v in batch_from_core(got).items()}
    if reader == "python":
        return {k: _plain(v) for k, v in flywheel.Table.open("hr/wide").to_dict(columns).items()}
    if reader == "loader":
        out = {}
        for b in flywheel.Loader("hr/wide", batch_size=3, shuffle=False, columns=columns):
            for k, v in b.items():
                out.setdefault(k, []).extend(_plain(v))
        return out
    if reader == "arrow":
        t = flywheel.Table.open("hr/wide").to_arrow(columns=columns)
        return {name: [r if not isinstance(r, list) else list(r) for r in t.column(name).to_pylist()]
                for name in t.column_names}
    r = fw(catdir, "bob", "table", "head", "hr/wide", "-n", "100", "--json",
           *(["--columns", ",".join(names)] if names else []), check=False)
    if r.returncode == 6:
        raise PermissionError(r.stderr)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    out = {k: [row[k] for row in rows] for k in rows[0]}
    if "blob" in out:  # the CLI prints binary as {"hex": ...}
        out["blob"] = [None if v is None else bytes.fromhex(v["hex"]) for v in out["blob"]]
    return out


@needs_cli
@pytest.mark.parametrize("mode", ["hash", "null", "refuse"])
@pytest.mark.parametrize("reader", READERS)
def test_every_read_path_masks_and_refuses_alike(catdir, reader, mode):
    flywheel.Table.create("hr/wide", WIDE_SCHEMA).append(WIDE)
    alice = fcat.default_catalog()
    for c in TAGGED:
        alice.tag_column("hr/wide", c, "pii")
    alice.grant("READ", "hr", "bob")
    alice.set_mask("hr/wide", mode)
    act(catdir, "bob")
    fcat.default_catalog().read_policy("hr/wide")  # fixes the dataset's salt
    con = sqlite3.connect(os.path.join(catdir, "catalog.db"), timeout=30)
    try:
        (salt,), = con.execute("SELECT salt FROM policies WHERE dataset = 'hr/wide'").fetchall()
    finally:
        con.close()
    expected = _expected(mode, salt)

    if mode == "refuse":
        before = len(events(catdir, "read"))
        with pytest.raises(PermissionError) as e:
            _read(reader, catdir)
        msg = str(e.value)
        assert any(f"'{c}'" in msg for c in TAGGED) and "'bob'" in msg and "refuses" in msg, msg
        with pytest.raises(PermissionError):
            _read(reader, catdir, ["score", "toks"])
        denied = [ev for ev in events(catdir, "read")[before:] if ev["detail"].get("denied")]
        assert len(denied) == 2 and denied[0]["principal"] == "bob", denied
        assert _read(reader, catdir, ["score"]) == {"score": expected["score"]}
        return
    got = _read(reader, catdir)
    assert sorted(got) == sorted(WIDE)  # the CLI's JSON objects list keys in name order
    for c in WIDE:
        assert got[c] == expected[c], (reader, c, got[c], expected[c])
    # A subset reads the same values.
    assert _read(reader, catdir, ["uid", "score"]) == {"uid": expected["uid"], "score": expected["score"]}
