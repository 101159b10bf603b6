#!/usr/bin/env python3
"""Print a compact one-line-per-event view of a dbz_capture.py JSONL file.

usage: summarize.py FILE.jsonl [--full]   (--full prints before/after in full)
Works for files written with and without schemas.enable.
"""
import json
import sys


def payload(doc):
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        return doc["payload"]
    return doc


def short(v, n=60):
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def main():
    path = sys.argv[1]
    full = "--full" in sys.argv
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        ev = json.loads(line)
        k, v = payload(ev["key"]), payload(ev["value"])
        dest = ev["destination"]
        if v is None:
            print(f"{i:3} {dest:24} TOMBSTONE key={short(k)}")
            continue
        if "op" not in v:  # transaction metadata
            print(f"{i:3} {dest:24} TX {v.get('status')} id={v.get('id')} "
                  f"event_count={v.get('event_count')} data_collections={short(v.get('data_collections'), 200)}")
            continue
        src = v["source"]
        tx = v.get("transaction")
        head = (f"{i:3} {dest:24} op={v['op']} snap={src.get('snapshot')} seq={src.get('sequence')} "
                f"lsn={src.get('lsn')} txId={src.get('txId')} key={short(k, 40)}")
        if tx:
            head += f" tx={tx['id']}/{tx['total_order']}/{tx['data_collection_order']}"
        print(head)
        for part in ("before", "after"):
            val = v.get(part)
            if val is None:
                continue
            if full:
                print(f"      {part}: {json.dumps(val, ensure_ascii=False)}")
            else:
                print(f"      {part}: {short({kk: (short(vv, 30) if isinstance(vv, str) else vv) for kk, vv in val.items()}, 220)}")


if __name__ == "__main__":
    main()
