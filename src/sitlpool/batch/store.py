"""A batch on disk, beside the logs: ``<data_dir>/batches/<batch_id>/`` holds ``batch.json``
(what was asked, its state), ``runs.jsonl`` (one line per finished run, appended as each
ends: a batch cut short keeps what it flew), ``runs.csv`` (the same, one column per metric,
for notebooks), and once compared ``compare.json`` and ``compare.png``."""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from ..procinfo import is_alive
from .plan import BatchError

_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
RUN_COLUMNS = [
    "index",
    "variant",
    "run",
    "seed",
    "status",
    "success",
    "error",
    "wall_s",
    "session_id",
    "log_id",
    "log_path",
]


def new_batch_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def batches_dir(data_dir: str | os.PathLike) -> Path:
    return Path(data_dir) / "batches"


class BatchDir:
    """One batch's files. Writes are whole-file replacements (temp + rename) except the
    append-only runs.jsonl, so a reader never sees half a file."""

    def __init__(self, data_dir: str | os.PathLike, batch_id: str):
        if not isinstance(batch_id, str) or not _ID.match(batch_id):
            raise BatchError(f"{batch_id!r} is not a batch id (like 20261201-132533-f771fc); batch_status lists none")
        self.id = batch_id
        self.path = batches_dir(data_dir) / batch_id
        self._lock = threading.Lock()

    @classmethod
    def create(cls, data_dir: str | os.PathLike) -> BatchDir:
        b = cls(data_dir, new_batch_id())
        b.path.mkdir(parents=True, exist_ok=False)
        return b

    def exists(self) -> bool:
        return (self.path / "batch.json").is_file()

    def check(self) -> BatchDir:
        if not self.exists():
            known = sorted(p.name for p in self.path.parent.glob("*") if (p / "batch.json").is_file())[-5:]
            raise BatchError(f"unknown batch {self.id!r}; recent batches: {', '.join(known) or 'none'}")
        return self

    def _write(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def write_meta(self, meta: dict) -> None:
        with self._lock:
            self._write("batch.json", json.dumps(meta, indent=1, default=str))

    def update_meta(self, **changes: Any) -> dict:
        with self._lock:
            meta = self.meta()
            meta.update(changes)
            self._write("batch.json", json.dumps(meta, indent=1, default=str))
            return meta

    def meta(self) -> dict:
        try:
            meta: dict = json.loads((self.path / "batch.json").read_text())
        except (OSError, ValueError) as e:
            raise BatchError(f"cannot read batch {self.id}: {e}") from None
        if meta.get("state") == "running" and not is_alive(int(meta.get("pid") or 0)):
            meta["state"] = "interrupted"  # whoever ran it is gone: what it flew is kept, marked partial
            meta["partial"] = True
        return meta

    def add_run(self, record: dict, metric_names: list[str]) -> None:
        with self._lock:
            with open(self.path / "runs.jsonl", "a") as f:
                f.write(json.dumps(record, default=str) + "\n")
            self._write_csv(metric_names)

    def runs(self) -> list[dict]:
        p = self.path / "runs.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line cut by a crash mid-write
        # a run flown again (its node lost) counts once: the last record wins
        by_index = {r["index"]: r for r in out}
        return [by_index[i] for i in sorted(by_index)]

    def _write_csv(self, metric_names: list[str]) -> None:
        metric_names = [m for m in metric_names if m not in RUN_COLUMNS]  # success: the run's own column
        tmp = self.path / ".runs.csv.tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(RUN_COLUMNS + metric_names)
            for r in self.runs():
                m = r.get("metrics") or {}
                w.writerow([r.get(c) for c in RUN_COLUMNS] + [m.get(n) for n in metric_names])
        os.replace(tmp, self.path / "runs.csv")

    def write_json(self, name: str, doc: Any) -> None:
        self._write(name, json.dumps(doc, indent=1, default=str))

    def write_bytes(self, name: str, data: bytes) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.path / name)
