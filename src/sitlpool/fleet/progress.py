"""The progress display of ``Fleet.map`` (rich): one bar for the batch, one row per node
with its done / failed / running counts."""

from __future__ import annotations


def node_key(host: str, node_id: str) -> str:
    return f"{host} ({node_id[:6]})"  # several nodes may share a host (one machine, tests)


class MapProgress:
    def __init__(self, total: int, enabled: bool = True):
        self.total = total
        self.enabled = enabled
        self.where: dict[int, str] = {}  # running item -> host
        self.counts: dict[str, dict[str, int]] = {}
        self._progress = None
        self._rows: dict[str, int] = {}

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description:<22}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.start()
            self._all = self._progress.add_task("all nodes", total=self.total, detail="")
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._refresh()
            self._progress.stop()

    def _node(self, host: str) -> dict[str, int]:
        return self.counts.setdefault(host, {"done": 0, "failed": 0, "running": 0})

    def running(self, where: dict, pending: set[int]) -> None:
        self.where = {i: node_key(*w) for i, w in where.items() if i in pending}
        self._refresh()

    def finished(self, index: int, host: str | None, ok: bool) -> None:
        self.where.pop(index, None)
        c = self._node(host or "lost")
        c["done" if ok else "failed"] += 1
        self._refresh()

    def lost(self, index: int) -> None:
        self.where.pop(index, None)
        self._refresh()

    def summary(self) -> dict[str, dict[str, int]]:
        out = {h: {**c, "running": 0} for h, c in self.counts.items()}
        for host in self.where.values():
            out.setdefault(host, {"done": 0, "failed": 0, "running": 0})["running"] += 1
        return out

    def _refresh(self) -> None:
        p = self._progress
        if p is None:
            return
        s = self.summary()
        finished = sum(c["done"] + c["failed"] for c in s.values())
        failed = sum(c["failed"] for c in s.values())
        p.update(self._all, completed=finished, detail=f"failed {failed}, running {len(self.where)}")
        for host, c in sorted(s.items()):
            if host not in self._rows:
                self._rows[host] = p.add_task(f"  {host}", total=None, detail="")
            p.update(
                self._rows[host],
                completed=c["done"] + c["failed"],
                detail=f"done {c['done']}, failed {c['failed']}, running {c['running']}",
            )
