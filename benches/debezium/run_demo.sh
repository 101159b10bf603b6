#!/usr/bin/env bash
# End-to-end proof: throwaway PostgreSQL 15 cluster -> real Debezium 3.6.3 PostgreSQL
# connector (embedded, via dbz_capture.py) -> JSONL files in benches/debezium.
#
#  A  sample_output.jsonl            snapshot (initial) + streaming, schemas.enable=true,
#                                    skipped.operations=none (so TRUNCATE is emitted)
#  B  sample_output_noschema_tx.jsonl same changes, schemas.enable=false,
#                                    provide.transaction.metadata=true, default skipped.operations
#  E  sample_output_nodata.jsonl     snapshot.mode=no_data, schemas.enable=false (streaming only),
#                                    --keep-raw (raw_key/raw_value strings kept)
#  R  sample_output_resume.jsonl     A's offsets reused: resumes streaming, no new snapshot
#  C  sample_output_altmodes1.jsonl  initial_only snapshot, stops by --max-events 7: decimal=string, time=connect,
#                                    binary=hex, interval=string, hstore=map
#  D  sample_output_altmodes2.jsonl  initial_only snapshot: decimal=double,
#                                    time=adaptive_time_microseconds, binary=base64-url-safe,
#                                    interval=numeric, hstore=json
#  F  sample_output_nulldefault.jsonl initial_only snapshot of typed, schemas.enable=false,
#                                    converter.replace.null.with.default=false
# The cluster is stopped and its data directory removed at the end (also on failure).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PGBIN=/usr/lib/postgresql/15/bin
PGDATA_DIR=/tmp/dbzdemo_pg
SOCK=/tmp/dbzdemo_sock
PORT="${DEMO_PORT:-55432}"
WORK="$HERE/demo/run"           # logs, offsets, ready files
PY="$HERE/venv/bin/python"
CAP="$HERE/dbz_capture.py"
PW=demo_pw
say() { printf '\n[demo %s] %s\n' "$(date +%T)" "$*"; }
PIDS=()

cleanup() {
  set +e
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  cp "$PGDATA_DIR/postgres.log" "$WORK/postgres.log" 2>/dev/null
  if [ -f "$PGDATA_DIR/postmaster.pid" ]; then
    say "stopping cluster"; su postgres -c "$PGBIN/pg_ctl -D $PGDATA_DIR -m fast -w stop" >/dev/null
  fi
  rm -rf "$PGDATA_DIR" "$SOCK"
  say "cluster stopped, $PGDATA_DIR removed"
}
trap cleanup EXIT

[ -x "$PY" ] || { echo "run $HERE/install.sh first" >&2; exit 1; }
rm -rf "$PGDATA_DIR" "$SOCK" "$WORK"; mkdir -p "$SOCK" "$WORK"; chown postgres "$SOCK"

say "initdb + start PostgreSQL 15 on 127.0.0.1:$PORT (socket $SOCK)"
su postgres -c "$PGBIN/initdb -D $PGDATA_DIR -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8" >"$WORK/initdb.log"
cat >>"$PGDATA_DIR/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
fsync = off
timezone = 'UTC'
CONF
su postgres -c "$PGBIN/pg_ctl -D $PGDATA_DIR -l $PGDATA_DIR/postgres.log -w start" >/dev/null
PSQL=(psql -X -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres)
"${PSQL[@]}" -q -c "ALTER USER postgres PASSWORD '$PW'" -c "CREATE DATABASE dbzdemo"
"${PSQL[@]}" -q -d dbzdemo -f "$HERE/demo/setup.sql"
"${PSQL[@]}" -d dbzdemo -At -c "SELECT 'toast_t.big: length='||length(big)||' stored bytes='||pg_column_size(big) FROM toast_t"
"${PSQL[@]}" -d dbzdemo -At -c "SELECT 'toast_t TOAST relation size='||pg_relation_size(reltoastrelid)||' bytes' FROM pg_class WHERE relname='toast_t'"

COMMON=(--host 127.0.0.1 --port "$PORT" --user postgres --password "$PW" --dbname dbzdemo
        --publication dbz_pub --topic-prefix dbz --fresh)
TABLES_ALL='public.typed,public.full_t,public.toast_t,public.toast_full,public.nokey,public.ck,public.special_t'

wait_streaming() {  # $1 = java log file
  for _ in $(seq 1 300); do
    grep -q 'Processing messages' "$1" 2>/dev/null && return 0
    sleep 0.2
  done
  echo "timeout waiting for streaming in $1" >&2; return 1
}

say "starting captures A (initial, schemas on), B (initial, no schemas + tx metadata), E (no_data)"
T_START=$(date +%s.%N)
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_a --tables "$TABLES_ALL" --snapshot-mode initial \
   -p skipped.operations=none \
   --out "$HERE/sample_output.jsonl" --offset-file "$WORK/a.offsets" --log-file "$WORK/a.log" \
   --idle-timeout 8 --max-runtime 240 >"$WORK/a.stdout" 2>"$WORK/a.stderr" & PIDS+=($!); PA=$!
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_b --tables "$TABLES_ALL" --snapshot-mode initial \
   --no-schemas -p provide.transaction.metadata=true --drop-slot-on-stop \
   --out "$HERE/sample_output_noschema_tx.jsonl" --offset-file "$WORK/b.offsets" --log-file "$WORK/b.log" \
   --idle-timeout 8 --max-runtime 240 >"$WORK/b.stdout" 2>"$WORK/b.stderr" & PIDS+=($!); PB=$!
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_e --tables "$TABLES_ALL" --snapshot-mode no_data \
   --no-schemas --drop-slot-on-stop --keep-raw \
   --out "$HERE/sample_output_nodata.jsonl" --offset-file "$WORK/e.offsets" --log-file "$WORK/e.log" \
   --idle-timeout 8 --max-runtime 240 >"$WORK/e.stdout" 2>"$WORK/e.stderr" & PIDS+=($!); PE=$!
wait_streaming "$WORK/a.log"; wait_streaming "$WORK/b.log"; wait_streaming "$WORK/e.log"
say "all three are streaming after $(echo "$(date +%s.%N) - $T_START" | bc) s; snapshot rows in A: $(wc -l <"$HERE/sample_output.jsonl")"

say "running demo/stream.sql"
"${PSQL[@]}" -d dbzdemo -f "$HERE/demo/stream.sql"

say "waiting for A, B, E to go idle (8 s) and exit"
rc=0
wait $PA || rc=$?; echo "A exit $rc"; cat "$WORK/a.stderr"
wait $PB || rc=$?; echo "B exit $rc"; cat "$WORK/b.stderr"
wait $PE || rc=$?; echo "E exit $rc"; cat "$WORK/e.stderr"
PIDS=()

say "resume test R: one more insert, then restart with A's offsets/slot (no --fresh): expect exactly that insert"
"${PSQL[@]}" -d dbzdemo -q -c "INSERT INTO public.ck VALUES (9, 'resume', 9)"
"$PY" "$CAP" --host 127.0.0.1 --port "$PORT" --user postgres --password "$PW" --dbname dbzdemo \
   --publication dbz_pub --topic-prefix dbz --slot dbz_a --tables "$TABLES_ALL" --snapshot-mode initial \
   -p skipped.operations=none --drop-slot-on-stop \
   --out "$HERE/sample_output_resume.jsonl" --offset-file "$WORK/a.offsets" --log-file "$WORK/r.log" \
   --idle-timeout 5 --max-runtime 120 || rc=$?

say "refilling typed for the alternative-mode snapshots C and D"
"${PSQL[@]}" -d dbzdemo -q -c "INSERT INTO public.typed SELECT * FROM public.typed_saved"
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_c --tables 'public.typed,public.special_t' --snapshot-mode initial_only \
   --drop-slot-on-stop \
   -p decimal.handling.mode=string -p time.precision.mode=connect -p binary.handling.mode=hex \
   -p interval.handling.mode=string -p hstore.handling.mode=map \
   --out "$HERE/sample_output_altmodes1.jsonl" --offset-file "$WORK/c.offsets" --log-file "$WORK/c.log" \
   --max-events 7 --max-runtime 120 || rc=$?   # 3 typed + 4 special_t rows
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_d --tables 'public.typed,public.special_t' --snapshot-mode initial_only \
   --drop-slot-on-stop \
   -p decimal.handling.mode=double -p time.precision.mode=adaptive_time_microseconds \
   -p binary.handling.mode=base64-url-safe -p interval.handling.mode=numeric -p hstore.handling.mode=json \
   --out "$HERE/sample_output_altmodes2.jsonl" --offset-file "$WORK/d.offsets" --log-file "$WORK/d.log" \
   --idle-timeout 5 --max-runtime 120 || rc=$?

say "F: snapshot of typed with converter.replace.null.with.default=false (row 3 has dflt NULL)"
"$PY" "$CAP" "${COMMON[@]}" --slot dbz_f --tables 'public.typed' --snapshot-mode initial_only \
   --drop-slot-on-stop --no-schemas -p converter.replace.null.with.default=false \
   --out "$HERE/sample_output_nulldefault.jsonl" --offset-file "$WORK/f.offsets" --log-file "$WORK/f.log" \
   --max-events 3 --max-runtime 120 || rc=$?

say "replication slots left: $("${PSQL[@]}" -d dbzdemo -At -c "SELECT coalesce(string_agg(slot_name, ','), 'none') FROM pg_replication_slots")"
wc -l "$HERE"/sample_output*.jsonl
say "done (rc=$rc); Java logs and offsets in $WORK"
exit $rc
