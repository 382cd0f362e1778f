"""The catalog from Python and the CLI: datasets named through it, runs and
their lineage (ingest -> transform -> train -> checkpoints), the exact
samples behind a checkpoint, resumed runs, OpenLineage events (validated
against the reference JSON Schema in ../shared/specs/openlineage, written to
the catalog's file and POSTed to an HTTP endpoint), runs without a catalog,
and hostile dataset names."""

import datetime
import http.server
import json
import os
import re
import subprocess
import threading
import urllib.parse

import numpy as np
import pytest

import flywheel
from flywheel import catalog as fcat

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The reference data lives beside the repository (../shared), not in it.
OL_SPEC = os.path.join(os.path.dirname(REPO), "shared", "specs", "openlineage")
BIN = os.environ.get("FLYWHEEL_BIN")
if BIN and os.sep in BIN:
    BIN = os.path.abspath(BIN)  # some tests run the CLI from another directory
needs_cli = pytest.mark.skipif(not BIN, reason="FLYWHEEL_BIN is not set")

# Environment variables that would point flywheel (in this process or a CLI
# child) at some other catalog or event sink.
_CATALOG_ENV = ("FLYWHEEL_CATALOG", "FLYWHEEL_WAREHOUSE", "FLYWHEEL_OPENLINEAGE_FILE", "FLYWHEEL_OPENLINEAGE_URL")

N_ROWS = 1000
BATCH = 64
SEED = 7


# ----------------------------------------------------------------- fixtures
@pytest.fixture
def isolated(monkeypatch):
    """Restores flywheel.catalog's process-wide default exactly as it was
    (use() changes _default, _default_key and _explicit) and keeps the
    environment's catalog settings out of the test."""
    for name in ("_default", "_default_key", "_explicit"):
        monkeypatch.setattr(fcat, name, getattr(fcat, name))
    for var in _CATALOG_ENV:
        monkeypatch.delenv(var, raising=False)
    yield
    fcat.use(None)  # drop the test's catalog now; monkeypatch then restores the originals


@pytest.fixture
def cat(tmp_path, isolated):
    """A fresh directory catalog made this process's default."""
    return fcat.use(str(tmp_path / "cat"))


def fw(*args, check=True, cwd=None, timeout=120):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       env=dict(os.environ))
    if check and r.returncode != 0:
        raise AssertionError(f"flywheel {' '.join(map(str, args))} exited {r.returncode}: {r.stderr}")
    return r


def write_clicks(path, n=N_ROWS):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "user": f"u{i % 37}", "score": (i * 7 % 101) / 10.0, "ok": i % 3 != 0}) + "\n")
    return str(path)


def take(loader, batches):
    """The "__index__" values of the next `batches` batches, in order."""
    out = []
    for _ in range(batches):
        b = loader.next()
        assert b is not None, "the epoch ended early"
        out.extend(np.asarray(b["__index__"]).tolist())
    return out


def replay_positions(detail, table="clean/clicks"):
    """The rows a fresh loader (same table, seed and order) hands out from
    detail["start"] up to detail["state"] (within one epoch)."""
    start, state = detail["start"], detail["state"]
    assert start["epoch"] == state["epoch"], "the replay below handles one epoch"
    n = state["consumed"] - start["consumed"]
    assert n % BATCH == 0, n
    loader = flywheel.Loader(table, batch_size=BATCH, shuffle=True, seed=SEED, return_indices=True)
    loader.load_state_dict(start)
    return take(loader, n // BATCH)


def scenario(tmp_path):
    """ingest -> clean (transform) -> train with two checkpoints, through the
    process's catalog. Returns what the steps saw."""
    s = {}
    src = write_clicks(tmp_path / "clicks.jsonl")
    s["src"] = src
    res = flywheel.ingest(src, "raw/clicks")
    assert res["rows"] == N_ROWS
    s["raw_version"] = res["versions"][-1]

    with flywheel.run("clean", job_type="transform", params={"drop": "ok == false"}) as clean:
        raw = flywheel.Table.open("raw/clicks")
        d = raw.to_dict()
        keep = np.asarray(d["ok"], dtype=bool)
        out = flywheel.Table.create("clean/clicks", {"id": "int64", "score": "float64"})
        out.append({"id": np.asarray(d["id"], dtype=np.int64)[keep], "score": np.asarray(d["score"])[keep]})
    s["clean_run"], s["clean_version"], s["clean_rows"] = clean.id, out.version, out.num_rows
    s["clean_ids"] = np.asarray(d["id"], dtype=np.int64)[keep]

    ckpt1, ckpt2 = str(tmp_path / "ckpt1.pt"), str(tmp_path / "ckpt2.pt")
    with flywheel.run("train", params={"lr": 0.1}) as train:
        loader = flywheel.Loader("clean/clicks", batch_size=BATCH, shuffle=True, seed=SEED, return_indices=True)
        before1 = take(loader, 3)
        with open(ckpt1, "wb") as f:
            f.write(b"model after 3 batches")
        s["art1"] = train.log_artifact(ckpt1)
        before2 = before1 + take(loader, 4)
        with open(ckpt2, "wb") as f:
            f.write(b"model after 7 batches")
        s["art2"] = train.log_artifact(ckpt2)
    s.update(train_run=train.id, ckpt1=ckpt1, ckpt2=ckpt2, before1=before1, before2=before2)
    return s


# --------------------------------------------------------- lineage, samples
def test_scenario_lineage_and_the_exact_samples_behind_each_checkpoint(cat, tmp_path):
    s = scenario(tmp_path)
    cat_dir = os.path.realpath(str(tmp_path / "cat"))

    # Dataset names were placed under the catalog directory.
    ds = {d["name"]: d for d in cat.datasets()}
    assert sorted(ds) == ["clean/clicks", "raw/clicks"]
    assert ds["raw/clicks"]["uri"] == os.path.join(cat_dir, "raw", "clicks")
    assert ds["clean/clicks"]["uri"] == os.path.join(cat_dir, "clean", "clicks")
    assert cat.dataset("raw/clicks")["namespace"] == "raw"
    assert flywheel.Table.open(os.path.join(cat_dir, "clean", "clicks")).num_rows == s["clean_rows"] == 666

    # upstream(ckpt1): train -> clean -> ingest, one run per depth.
    up = cat.upstream(s["ckpt1"])
    assert up["direction"] == "up"
    assert up["start"]["id"] == "artifact:" + os.path.abspath(s["ckpt1"])
    assert [(r["job"], r["job_type"], r["depth"]) for r in up["runs"]] == [
        ("train", "train", 1), ("clean", "transform", 2), ("ingest:raw/clicks", "ingest", 3)]
    train, clean, ingest = up["runs"]
    assert train["run_id"] == s["train_run"] and clean["run_id"] == s["clean_run"]
    assert all(r["state"] == "COMPLETE" for r in up["runs"])
    assert train["params"] == {"lr": 0.1}
    assert clean["params"] == {"drop": "ok == false"}
    assert [i["id"] for i in train["inputs"]] == [f"clean/clicks@{s['clean_version']}"]
    assert {(o["id"], o["hash"]) for o in train["outputs"]} == {
        ("artifact:" + s["art1"]["path"], s["art1"]["hash"]), ("artifact:" + s["art2"]["path"], s["art2"]["hash"])}
    assert [i["id"] for i in clean["inputs"]] == [f"raw/clicks@{s['raw_version']}"]
    assert {o["id"] for o in clean["outputs"]} == {f"clean/clicks@{v}" for v in range(1, s["clean_version"] + 1)}
    assert [i["id"] for i in ingest["inputs"]] == ["file:" + os.path.realpath(s["src"])]
    assert ingest["inputs"][0]["detail"]["rows"] == N_ROWS
    assert [o["id"] for o in ingest["outputs"]] == [f"raw/clicks@{s['raw_version']}"]
    # get_run says the same as the walk.
    assert cat.get_run(s["train_run"])["outputs"] == train["outputs"]

    # downstream(raw/clicks@v) reaches the train run and its checkpoints.
    down = cat.downstream(f"raw/clicks@{s['raw_version']}")
    assert [(r["job"], r["depth"]) for r in down["runs"]] == [("clean", 1), ("train", 2)]
    assert {o["hash"] for o in down["runs"][1]["outputs"]} == {s["art1"]["hash"], s["art2"]["hash"]}
    assert s["art1"]["hash"].startswith("xxh3:") and s["art1"]["hash"] != s["art2"]["hash"]

    # samples: the loader's start and state at the moment each checkpoint was logged.
    for ckpt, before, consumed in ((s["ckpt1"], s["before1"], 3 * BATCH), (s["ckpt2"], s["before2"], 7 * BATCH)):
        smp = cat.samples(ckpt)
        assert smp["run_id"] == s["train_run"]
        assert [(src["dataset"], src["version"]) for src in smp["sources"]] == [("clean/clicks", s["clean_version"])]
        detail = smp["sources"][0]["detail"]
        assert len(before) == consumed
        assert detail["state"]["consumed"] == consumed, (ckpt, detail["state"])
        assert detail["start"]["consumed"] == 0 and detail["start"]["epoch"] == 0 == detail["state"]["epoch"]
        assert detail["state"]["seed"] == SEED and detail["rank"] == 0 and detail["world_size"] == 1
        # The key check: replaying the recorded positions yields exactly the
        # rows the training loop saw before this checkpoint, in its order.
        replayed = replay_positions(detail)
        assert len(set(before)) == len(before), "a row was served twice within one epoch"
        assert set(replayed) == set(before)
        assert replayed == before, f"samples({os.path.basename(ckpt)}) replay differs from what training saw"
    # The run's own input edge carries the loader's final state.
    assert train["inputs"][0]["detail"]["state"]["consumed"] == 7 * BATCH


@needs_cli
def test_resumed_run_lists_the_samples_it_resumed_from(cat, tmp_path):
    s = scenario(tmp_path)
    ckpt3 = str(tmp_path / "ckpt3.pt")
    with flywheel.run("train-resume") as run:
        run.use_artifact(s["ckpt1"])
        state = cat.samples(s["ckpt1"])["sources"][0]["detail"]["state"]
        loader = flywheel.Loader("clean/clicks", batch_size=BATCH, shuffle=True, seed=SEED, return_indices=True)
        loader.load_state_dict(state)
        seen = take(loader, 3)
        with open(ckpt3, "wb") as f:
            f.write(b"resumed model")
        art3 = run.log_artifact(ckpt3)
    # The resumed loader continued exactly where ckpt1 stood.
    assert seen == s["before2"][3 * BATCH:6 * BATCH]
    detail = cat.samples(ckpt3)["sources"][0]["detail"]
    assert (detail["start"]["consumed"], detail["state"]["consumed"]) == (3 * BATCH, 6 * BATCH)
    assert replay_positions(detail) == seen
    # The resumed run sits downstream of ckpt1 and upstream of ckpt3; it read
    # clean/clicks itself too, so the clean run is two steps up either way.
    assert [r["job"] for r in cat.downstream(s["ckpt1"])["runs"]] == ["train-resume"]
    assert [(r["job"], r["depth"]) for r in cat.upstream(ckpt3)["runs"]] == [
        ("train-resume", 1), ("clean", 2), ("train", 2), ("ingest:raw/clicks", 3)]  # within a depth: by start time

    catdir = str(tmp_path / "cat")
    text = fw("--catalog", catdir, "lineage", "samples", ckpt3).stdout
    lines = text.splitlines()
    assert lines[0] == f"artifact:{art3['path']} ({art3['hash']}), logged by run {run.id} (train-resume)", text
    assert lines[1] == f"  clean/clicks@{s['clean_version']}: seed {SEED}, row shuffle: epoch 0 positions [192, 384)"
    assert lines[2] == "  resumed from:"
    assert lines[3] == (f"  artifact:{s['art1']['path']} ({s['art1']['hash']}), logged by run {s['train_run']} "
                        "(train)")
    assert lines[4] == f"    clean/clicks@{s['clean_version']}: seed {SEED}, row shuffle: epoch 0 positions [0, 192)"
    assert len(lines) == 5, text

    js = json.loads(fw("--catalog", catdir, "lineage", "samples", ckpt3, "--json").stdout)
    assert [(e["artifact"]["name"], e["job"], e["run_id"]) for e in js] == [
        (art3["path"], "train-resume", run.id), (s["art1"]["path"], "train", s["train_run"])]
    assert js[0]["artifact"]["hash"] == art3["hash"] and js[1]["artifact"]["hash"] == s["art1"]["hash"]
    assert js[1]["sources"] == cat.samples(s["ckpt1"])["sources"]
    assert js[1]["sources"][0]["detail"]["state"]["consumed"] == 3 * BATCH


# -------------------------------------------------------------- OpenLineage
def _load_spec():
    if not os.path.isdir(OL_SPEC):
        pytest.skip(f"OpenLineage reference schema not found at {OL_SPEC} (../shared/specs/openlineage)")
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(OL_SPEC, "OpenLineage.json")) as f:
        main = json.load(f)
    facets = {}
    for name in sorted(os.listdir(os.path.join(OL_SPEC, "facets"))):
        if name.endswith(".json"):
            with open(os.path.join(OL_SPEC, "facets", name)) as f:
                facets[name[:-len(".json")]] = json.load(f)
    store = {main["$id"]: main}
    store.update({s["$id"]: s for s in facets.values()})
    cls = jsonschema.Draft202012Validator
    checker = getattr(cls, "FORMAT_CHECKER", None) or jsonschema.FormatChecker()

    def validator(schema):
        resolver = jsonschema.RefResolver(base_uri=schema["$id"], referrer=schema, store=store)
        return cls(schema, resolver=resolver, format_checker=checker)

    return main, facets, validator, checker


# Standard facets flywheel emits -> the reference file that defines them.
_FACET_FILES = {
    "schema": "SchemaDatasetFacet", "dataSource": "DatasourceDatasetFacet", "version": "DatasetVersionDatasetFacet",
    "storage": "StorageDatasetFacet", "jobType": "JobTypeJobFacet", "processing_engine": "ProcessingEngineRunFacet",
    "errorMessage": "ErrorMessageRunFacet",
}


def _errors(v, instance):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(instance)]


def validate_events(events):
    """Every event against OpenLineage.json (and its RunEvent definition),
    every standard facet against its own facet schema. Returns the number of
    facets checked per facet name."""
    main, facets, validator, checker = _load_spec()
    whole = validator(main)
    run_event = validator({"$id": "urn:test:run-event", "$ref": main["$id"] + "#/$defs/RunEvent"})
    by_file = {name: validator(schema) for name, schema in facets.items()}
    checked = {}
    for i, ev in enumerate(events):
        assert not _errors(whole, ev), (i, _errors(whole, ev), ev)
        assert not _errors(run_event, ev), (i, _errors(run_event, ev))
        if "uuid" in checker.checkers:
            assert checker.conforms(ev["run"]["runId"], "uuid"), ev["run"]["runId"]
        utc = datetime.timezone.utc
        when = datetime.datetime.strptime(ev["eventTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=utc)
        assert abs((datetime.datetime.now(utc) - when).total_seconds()) < 3600, ev["eventTime"]
        groups = [ev["run"].get("facets", {}), ev["job"].get("facets", {})]
        groups += [d.get("facets", {}) for d in ev["inputs"] + ev["outputs"]]
        for group in groups:
            for name, facet in group.items():
                if name not in _FACET_FILES:
                    continue
                file = _FACET_FILES[name]
                assert facet["_schemaURL"] == facets[file]["$id"] + "#/$defs/" + file, facet["_schemaURL"]
                errs = _errors(by_file[file], {name: facet})
                assert not errs, (i, name, errs, facet)
                checked[name] = checked.get(name, 0) + 1
    return checked


def read_events(cat_dir):
    with open(os.path.join(cat_dir, "openlineage.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_openlineage_events_validate_against_the_reference_schema(cat, tmp_path):
    s = scenario(tmp_path)
    with pytest.raises(ValueError):
        with flywheel.run("broken", job_type="transform"):
            raise ValueError("bad input")
    events = read_events(str(tmp_path / "cat"))
    checked = validate_events(events)
    # Every facet flywheel emits was seen and checked at least once.
    assert set(checked) == set(_FACET_FILES), checked

    # The validation is not vacuous: broken copies are refused.
    done = next(e for e in events if e["eventType"] == "COMPLETE" and e["outputs"])
    for path, value in ((("eventType",), "DONE"), (("run", "runId"), "run-1"), (("producer",), "not a uri"),
                        (("outputs", 0, "facets", "version", "datasetVersion"), 2)):
        bad = json.loads(json.dumps(done))
        node = bad
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises(AssertionError):
            validate_events([bad])

    # One START and exactly one terminal event per run, START first.
    per_run = {}
    for ev in events:
        per_run.setdefault(ev["run"]["runId"], []).append(ev["eventType"])
    assert all(types[0] == "START" and types.count("START") == 1 for types in per_run.values()), per_run
    assert all(len(types) == 2 and types[1] in ("COMPLETE", "FAIL", "ABORT") for types in per_run.values()), per_run
    # The runIds are the catalog's runs: the scenario's three plus the failed one.
    walked = {r["run_id"] for r in cat.upstream(s["ckpt2"])["runs"]}
    assert len(walked) == 3 and walked <= set(per_run)
    assert len(per_run) == 4
    for run_id, types in per_run.items():
        r = cat.get_run(run_id)
        assert r["state"] == types[1]
        assert r["job"] == next(e["job"]["name"] for e in events if e["run"]["runId"] == run_id)

    # The terminal events carry the run's inputs and outputs with their facets.
    done = {e["job"]["name"]: e for e in events if e["eventType"] == "COMPLETE"}
    assert set(done) == {"ingest:raw/clicks", "clean", "train"}
    out = done["ingest:raw/clicks"]["outputs"][0]
    assert (out["namespace"], out["name"]) == ("flywheel", "raw/clicks")
    assert out["facets"]["version"]["datasetVersion"] == str(s["raw_version"])
    assert out["facets"]["dataSource"]["uri"] == "file://" + os.path.realpath(str(tmp_path / "cat" / "raw" / "clicks"))
    assert [(f["name"], f["type"]) for f in out["facets"]["schema"]["fields"]] == [
        ("id", "int64"), ("user", "string"), ("score", "float64"), ("ok", "bool")]
    assert [(d["namespace"], d["name"]) for d in done["clean"]["inputs"]] == [("flywheel", "raw/clicks")]
    train = done["train"]
    assert [d["name"] for d in train["inputs"]] == ["clean/clicks"]
    assert train["inputs"][0]["inputFacets"]["flywheel"]["detail"]["state"]["consumed"] == 7 * BATCH
    arts = {d["name"]: d["facets"]["version"]["datasetVersion"] for d in train["outputs"] if d["namespace"] == "file"}
    assert arts == {s["art1"]["path"]: s["art1"]["hash"], s["art2"]["path"]: s["art2"]["hash"]}
    assert train["job"]["facets"]["jobType"]["jobType"] == "train"
    assert train["run"]["facets"]["flywheel_params"]["params"] == {"lr": 0.1}


def test_openlineage_datasource_uri_of_a_name_with_space_and_unicode_is_a_uri(cat, tmp_path):
    t = flywheel.Table.create("o'b;r/tä ble", {"x": "int64"})
    t.append({"x": [1, 2]})
    events = read_events(str(tmp_path / "cat"))
    uris = [d["facets"]["dataSource"]["uri"] for e in events for d in e["outputs"] if "dataSource" in d["facets"]]
    assert len(uris) == 2
    for uri in uris:
        parsed = urllib.parse.urlsplit(uri)
        assert parsed.scheme == "file" and urllib.parse.unquote(parsed.path) == os.path.realpath(t.path), uri
        assert uri.isascii() and " " not in uri, (
            "regression: the OpenLineage dataSource facet's uri (format: uri) is 'file://' + the raw path, not "
            f"percent-encoded, so a path with a space or non-ASCII is not a URI: {uri!r} "
            "(src/flywheel/catalog/openlineage.cc, DatasetJson: src[\"uri\"] = \"file://\" + uri)")
    validate_events(events)


def test_failing_run_reraises_and_is_recorded_as_fail(cat, tmp_path):
    with pytest.raises(RuntimeError, match="^boom$"):
        with flywheel.run("flaky", job_type="transform") as run:
            t = flywheel.Table.create("tmp/partial", {"x": "int64"})
            t.append({"x": np.arange(5)})
            raise RuntimeError("boom")
    assert run.id is not None
    r = cat.get_run(run.id)
    assert (r["job"], r["job_type"], r["state"]) == ("flaky", "transform", "FAIL")
    assert r["ended_ms"] >= r["started_ms"] > 0
    # What it wrote before failing is still recorded as its output.
    assert {o["id"] for o in r["outputs"]} == {"tmp/partial@1", "tmp/partial@2"}

    events = [e for e in read_events(str(tmp_path / "cat")) if e["run"]["runId"] == run.id]
    assert [e["eventType"] for e in events] == ["START", "FAIL"]
    err = events[1]["run"]["facets"]["errorMessage"]
    assert err["message"] == "RuntimeError: boom"
    assert "errorMessage" not in events[0]["run"]["facets"]
    validate_events(events)

    # A KeyboardInterrupt ends the run as ABORT (and is re-raised too).
    with pytest.raises(KeyboardInterrupt):
        with flywheel.run("interrupted") as run2:
            raise KeyboardInterrupt
    assert cat.get_run(run2.id)["state"] == "ABORT"


def test_failed_run_error_message_is_readable_from_the_catalog(cat):
    with pytest.raises(RuntimeError):
        with flywheel.run("flaky") as run:
            raise RuntimeError("boom")
    r = cat.get_run(run.id)
    assert r["state"] == "FAIL"
    assert r.get("error") == "RuntimeError: boom", (
        "regression: the catalog stores a failed run's error (runs.error) but Catalog.get_run / lineage JSON "
        f"(GraphJson in src/flywheel/catalog/catalog.cc) never return it; get_run gave keys {sorted(r)}")


class _Recorder(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.posts.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def lineage_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorder)
    server.posts, server.status = [], 201
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@needs_cli
def test_cli_ingest_posts_openlineage_events_to_the_http_endpoint(isolated, tmp_path, monkeypatch, lineage_server):
    src = write_clicks(tmp_path / "clicks.jsonl", n=50)
    catdir = str(tmp_path / "cat")
    monkeypatch.setenv("FLYWHEEL_OPENLINEAGE_URL", f"http://127.0.0.1:{lineage_server.server_address[1]}")
    r = fw("--catalog", catdir, "ingest", "-q", src, "raw/clicks")
    assert "ingested 50 rows" in r.stdout

    posts = lineage_server.posts
    assert [p[0] for p in posts] == ["/api/v1/lineage", "/api/v1/lineage"], posts
    assert all(p[1] == "application/json" for p in posts)
    events = [json.loads(p[2]) for p in posts]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert events[0]["run"]["runId"] == events[1]["run"]["runId"]
    assert {e["job"]["name"] for e in events} == {"ingest:raw/clicks"}
    done = events[1]
    assert [(d["namespace"], d["name"], d["facets"]["version"]["datasetVersion"]) for d in done["outputs"]] == [
        ("flywheel", "raw/clicks", "2")]
    assert [(d["namespace"], d["name"]) for d in done["inputs"]] == [("file", os.path.realpath(src))]
    # The same events went to the catalog's own file.
    assert read_events(catdir) == events
    validate_events(events)

    # An endpoint that refuses the events costs the events, not the ingest.
    lineage_server.status = 500
    r = fw("--catalog", catdir, "ingest", "-q", src, "raw/clicks")
    assert "ingested 50 rows" in r.stdout and "not delivered" in r.stderr
    assert len(posts) == 4 and [e["eventType"] for e in read_events(catdir)][2:] == ["START", "COMPLETE"]


# ------------------------------------------------------------ no catalog
def test_without_a_catalog_runs_record_nothing(isolated, tmp_path, monkeypatch):
    env_cat = tmp_path / "env-catalog"
    monkeypatch.setenv("FLYWHEEL_CATALOG", str(env_cat))
    assert fcat.use(None) is None
    assert fcat.default_catalog() is None, "use(None) must turn recording off even with FLYWHEEL_CATALOG set"
    monkeypatch.chdir(tmp_path)

    data = tmp_path / "data"
    data.mkdir()
    src = write_clicks(data / "c.jsonl", n=100)
    with flywheel.run("train", params={"lr": 1}) as run:
        assert run.id is None and fcat.current_run() is run
        flywheel.ingest(src, str(data / "t"))
        t = flywheel.Table.open(str(data / "t"))
        assert t.num_rows == 100
        t.append({"id": [1000]})
        loader = flywheel.Loader(str(data / "t"), batch_size=10, seed=1)
        assert len(loader.next()["id"]) == 10
        ckpt = data / "ckpt.pt"
        ckpt.write_bytes(b"x")
        assert run.log_artifact(str(ckpt)) == {"path": str(ckpt), "hash": ""}
        run.add_input(str(src))
        run.add_output("ns/t@3")
        run.use_artifact(str(ckpt))
    assert run.id is None and fcat.current_run() is None

    # Nothing appeared but what the test wrote; no catalog anywhere.
    assert os.listdir(tmp_path) == ["data"]
    assert sorted(os.listdir(data)) == ["c.jsonl", "ckpt.pt", "t"]
    assert not env_cat.exists()
    for d, _, names in os.walk(tmp_path):
        assert not {"catalog.db", "openlineage.jsonl"} & set(names), (d, names)


def test_without_a_catalog_add_output_of_a_table_is_a_no_op(isolated, tmp_path):
    fcat.use(None)
    t = flywheel.Table.create(str(tmp_path / "t"), {"x": "int64"})
    with flywheel.run("train") as run:
        try:
            run.add_input(t)
            run.add_output(t)
        except ValueError as e:
            pytest.fail("regression: without a catalog run.add_input/add_output(Table) raise instead of recording nothing "
                        "(the same script should run with and without a catalog): python/flywheel/catalog.py "
                        f"Run._as_node -> _node_text names the Table before _edge checks run.id is None: {e}")
    assert run.id is None
    assert not os.path.exists(tmp_path / "catalog.db")


# ------------------------------------------------------------------ names
def test_hostile_dataset_names_are_bound_and_stay_under_the_catalog(cat, tmp_path):
    cat_dir = os.path.realpath(str(tmp_path / "cat"))
    outside_before = sorted(os.listdir(tmp_path))

    weird = "o'b;r/tä ble"
    t = flywheel.Table.create(weird, {"x": "int64"})
    t.append({"x": np.arange(3)})
    assert os.path.realpath(t.path) == os.path.join(cat_dir, "o'b;r", "tä ble")
    assert os.path.commonpath([os.path.realpath(t.path), cat_dir]) == cat_dir
    assert cat.dataset(weird)["uri"] == os.path.realpath(t.path)
    assert flywheel.Table.open(weird).num_rows == 3

    other = tmp_path / "elsewhere"  # registering a name creates nothing there
    sql = "x'); DROP TABLE datasets; --/\"q\" ;é✓"
    d = cat.register(sql, str(other))
    assert d == {"name": sql, "namespace": "x'); DROP TABLE datasets; --", "uri": os.path.realpath(str(other)),
                 "created_ms": d["created_ms"]}
    assert cat.dataset(sql)["uri"] == os.path.realpath(str(other))
    assert cat.register(sql, str(other))["name"] == sql  # same name and table: a no-op
    names = [x["name"] for x in cat.datasets()]
    assert weird in names and sql in names
    assert [x["name"] for x in cat.datasets(namespace="o'b;r")] == [weird]
    up = cat.upstream(f"{weird}@2")
    assert sorted((r["job"], [i["id"] for i in r["inputs"]], [o["id"] for o in r["outputs"]]) for r in up["runs"]) == [
        (f"append:{weird}", [f"{weird}@1"], [f"{weird}@2"]),
        (f"create:{weird}", [], [f"{weird}@1"])]

    for bad in ("../x", "a/../b", "ns/..", "./t", "a/b/c", "noslash", "ns/", "/t", "ns/a\\b", "ns/t\n"):
        with pytest.raises(ValueError):
            cat.register(bad, str(other))
        with pytest.raises(ValueError):
            cat.dataset(bad)
    with pytest.raises(FileExistsError):
        cat.register("ns/other-name", str(other))  # the table is already named
    with pytest.raises(FileNotFoundError):
        cat.dataset("ns/missing")
    # resolve() never maps a name that escapes the warehouse into it (or above it).
    assert cat.resolve("../x", create=True) == "../x"
    assert cat.resolve("ns/new", create=True) == os.path.join(cat_dir, "ns", "new")
    assert not os.path.exists(os.path.join(cat_dir, "ns"))
    assert sorted(os.listdir(tmp_path)) == outside_before
    assert not os.path.exists(os.path.join(os.path.dirname(cat_dir), "x"))


# --------------------------------------------------------------- CLI forms
_DOT_ID = r'"(?:[^"\\]|\\.)*"'


def parse_dot(text):
    """Checks the dot is well formed line by line; returns (declared, edges)."""
    lines = text.splitlines()
    assert lines[0] == "digraph lineage {" and lines[-1] == "}", text
    declared, edges = set(), []
    for line in lines[1:-1]:
        line = line.strip()
        if line in ("rankdir=LR;",) or line.startswith("node ["):
            continue
        m = re.fullmatch(rf"({_DOT_ID}) -> ({_DOT_ID});", line)
        if m:
            edges.append((m.group(1), m.group(2)))
            continue
        m = re.fullmatch(rf"({_DOT_ID}) \[(.*)\];", line)
        assert m, f"not a dot statement: {line!r}"
        attrs = m.group(2)
        assert re.fullmatch(rf"(\w+=(\w+|{_DOT_ID}))(, \w+=(\w+|{_DOT_ID}))*", attrs), line
        declared.add(m.group(1))
    return declared, edges


def _undot(q):
    return re.sub(r"\\(.)", r"\1", q[1:-1])


@needs_cli
def test_cli_lineage_up_json_and_dot_are_well_formed(cat, tmp_path):
    s = scenario(tmp_path)
    catdir = str(tmp_path / "cat")
    js = json.loads(fw("--catalog", catdir, "lineage", "up", s["ckpt2"], "--json").stdout)
    assert js == cat.upstream(s["ckpt2"])
    assert [(r["job"], r["depth"]) for r in js["runs"]] == [("train", 1), ("clean", 2), ("ingest:raw/clicks", 3)]
    down = json.loads(fw("--catalog", catdir, "lineage", "down", f"raw/clicks@{s['raw_version']}", "--json").stdout)
    assert down == cat.downstream(f"raw/clicks@{s['raw_version']}")

    dot = fw("--catalog", catdir, "lineage", "up", s["ckpt2"], "--dot").stdout
    assert dot.startswith("digraph")
    declared, edges = parse_dot(dot)
    assert edges, dot
    for a, b in edges:
        assert a in declared and b in declared, (a, b)
    nodes = {_undot(n) for n in declared}
    assert {"artifact:" + s["art2"]["path"], f"clean/clicks@{s['clean_version']}", f"raw/clicks@{s['raw_version']}",
            "file:" + os.path.realpath(s["src"])} <= nodes
    runs = {n for n in nodes if n.startswith("run:")}
    assert runs == {"run:" + r["run_id"] for r in js["runs"]}
    assert (f'"run:{s["train_run"]}"', f'"artifact:{s["art2"]["path"]}"') in edges
    assert (f'"clean/clicks@{s["clean_version"]}"', f'"run:{s["train_run"]}"') in edges

    # Quotes in names are escaped.
    t = flywheel.Table.create('q"n/t"1', {"x": "int64"})
    t.append({"x": [1]})
    declared, edges = parse_dot(fw("--catalog", catdir, "lineage", "up", 'q"n/t"1@2', "--dot").stdout)
    assert '"q\\"n/t\\"1@2"' in declared and len(edges) == 3
    for a, b in edges:
        assert a in declared and b in declared, (a, b)


@needs_cli
def test_cli_lineage_up_of_a_relative_checkpoint_path(cat, tmp_path):
    (tmp_path / "ckpt").mkdir()
    with flywheel.run("train") as run:
        with open(tmp_path / "ckpt" / "model.pt", "wb") as f:
            f.write(b"weights")
        run.log_artifact(str(tmp_path / "ckpt" / "model.pt"))
    catdir = str(tmp_path / "cat")
    # An absolute path and a relative one without '/' are artifacts ...
    assert [r["job"] for r in cat.upstream(str(tmp_path / "ckpt" / "model.pt"))["runs"]] == ["train"]
    got = json.loads(fw("--catalog", catdir, "lineage", "up", "model.pt", "--json", cwd=str(tmp_path / "ckpt")).stdout)
    assert [r["run_id"] for r in got["runs"]] == [run.id]
    # ... and so is "ckpt/model.pt" (the form docs and help use), which also
    # happens to look like a dataset name "ns/t".
    got = json.loads(fw("--catalog", catdir, "lineage", "up", "ckpt/model.pt", "--json", cwd=str(tmp_path)).stdout)
    assert [r["run_id"] for r in got["runs"]] == [run.id], (
        "regression: `flywheel lineage up ckpt/model.pt` parses an existing checkpoint path with one '/' as dataset "
        f"'ckpt/model.pt' (src/flywheel/cli/catalog_commands.cc, lineage up/down callback: Node::Parse before the "
        f"artifact fallback) and finds no runs; start was {got['start']}")


@needs_cli
def test_cli_lineage_dot_of_a_path_ending_in_a_backslash_is_well_formed(cat, tmp_path):
    ckpt = str(tmp_path / "model\\")  # a legal file name on POSIX
    with open(ckpt, "wb") as f:
        f.write(b"weights")
    with flywheel.run("train") as run:
        run.log_artifact(ckpt)
    dot = fw("--catalog", str(tmp_path / "cat"), "lineage", "up", ckpt, "--dot").stdout
    try:
        declared, edges = parse_dot(dot)
    except AssertionError as e:
        raise AssertionError(
            "regression: `lineage --dot` does not escape backslashes in node ids, so a trailing '\\' escapes the closing "
            f"quote (src/flywheel/cli/catalog_commands.cc, DotQuote): {e}\n{dot}") from None
    assert ('"run:%s"' % run.id, '"artifact:%s"' % ckpt.replace("\\", "\\\\")) in edges, dot


def test_use_artifact_pins_the_checkpoint_even_if_its_path_is_logged_again(cat, tmp_path):
    """Resuming records the checkpoint's hash: a later run that overwrites
    and re-logs the same path does not change what the resumed run used."""
    ckpt = str(tmp_path / "model.pt")
    with open(ckpt, "w") as f:
        f.write("weights v1")
    with flywheel.run("train-a") as a:
        v1 = a.log_artifact(ckpt)
    with flywheel.run("train-b") as b:
        b.use_artifact(ckpt)
        out = str(tmp_path / "model-b.pt")
        with open(out, "w") as f:
            f.write("weights b")
        b.log_artifact(out)
    with open(ckpt, "w") as f:
        f.write("weights v2")
    with flywheel.run("train-c") as c:
        v2 = c.log_artifact(ckpt)
    assert v1["hash"] != v2["hash"]
    edges = cat.get_run(b.id)["inputs"]
    assert [(e["kind"], e["hash"]) for e in edges] == [("artifact", v1["hash"])]
    # Walking up from b's checkpoint meets train-a (the v1 logging), not train-c.
    jobs = [r["job"] for r in cat.upstream(out)["runs"]]
    assert jobs == ["train-b", "train-a"], jobs


def test_a_loader_iterated_before_the_run_is_recorded_from_its_first_batch_inside(cat, tmp_path):
    t = flywheel.Table.create("ds/t", {"x": "int64"})
    t.append({"x": np.arange(256)})
    loader = flywheel.Loader("ds/t", batch_size=32, seed=1)
    it = iter(loader)
    next(it)
    next(it)  # 64 positions consumed before the run
    with flywheel.run("late") as r:
        next(it)
        ck = str(tmp_path / "late.pt")
        with open(ck, "w") as f:
            f.write("w")
        r.log_artifact(ck)
    detail = cat.samples(ck)["sources"][0]["detail"]
    assert (detail["start"]["consumed"], detail["state"]["consumed"]) == (64, 96)


@needs_cli
def test_json_log_lines_carry_the_run_id(isolated, tmp_path):
    """FLYWHEEL_LOG_FORMAT=json: one JSON object per line, with the run id
    (here from FLYWHEEL_RUN_ID) beside ts, level, file, line and msg. An
    unreachable OpenLineage endpoint makes the CLI log warnings to read."""
    env = dict(os.environ, FLYWHEEL_LOG_FORMAT="json", FLYWHEEL_RUN_ID="run-42",
               FLYWHEEL_OPENLINEAGE_URL="http://127.0.0.1:1", FLYWHEEL_CATALOG=str(tmp_path / "cat"))
    r = subprocess.run([BIN, "table", "create", "ns/t", "--schema", "x:int64"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(ln) for ln in r.stderr.splitlines() if ln.strip()]
    assert lines, r.stderr
    for d in lines:
        assert d["run_id"] == "run-42" and d["level"] == "warning"
        assert {"ts", "file", "line", "msg"} <= set(d)
    assert any("OpenLineage" in d["msg"] and "not delivered" in d["msg"] for d in lines)
