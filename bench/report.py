"""Figures: one JSON object per line as they are measured, a table at the end, results files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Figure:
    """One measured figure. ``rule`` says how ``met`` was decided: ``ratio<=``,
    ``ratio>=``, ``value<=`` (against ``target``) or ``info`` (no target)."""

    id: str
    what: str
    value: float | None
    unit: str
    floor: float | None = None
    target: float | None = None
    rule: str = "ratio<="
    repeats: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    status: str = "measured"  # or "pending" / "skipped" (value None; details say why)
    verdict: bool | None = None  # rule "check": met is decided by the figure's own test

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.floor:
            return None
        return self.value / self.floor

    @property
    def met(self) -> bool | None:
        if self.rule == "check":
            return self.verdict
        if self.value is None or self.target is None or self.rule == "info":
            return None
        checked = self.value if self.rule.startswith("value") else self.ratio
        if checked is None:
            return None
        return checked <= self.target if self.rule.endswith("<=") else checked >= self.target

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "value": _round(self.value), "floor": _round(self.floor),
            "ratio": _round(self.ratio), "target": self.target, "unit": self.unit,
            "met": self.met, "repeats": self.repeats, "rule": self.rule, "what": self.what,
        }
        if self.status != "measured":
            out["status"] = self.status
        out.update({k: _round(v) for k, v in self.details.items()})
        return out


def _round(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}") if abs(v) < 1000 else round(v, 1)
    if isinstance(v, dict):
        return {k: _round(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_round(x) for x in v]
    return v


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return float(s[k])


class Report:
    def __init__(self, argv: list[str]) -> None:
        self.figures: list[Figure] = []
        self.started = time.time()
        self.load_at_start = _loadavg()  # the machine as the run found it (machine() is called at the end)
        self.argv = argv
        self.notes: list[str] = []

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        print(json.dumps(fig.as_json(), ensure_ascii=False), flush=True)
        return fig

    def machine(self) -> dict[str, Any]:
        cpu = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return {"nproc": os.cpu_count(), "cpu": cpu, "python": sys.version.split()[0],
                "platform": platform.platform(), "loadavg_at_start": self.load_at_start,
                "loadavg_at_end": _loadavg()}

    def table(self) -> str:
        rows = [("id", "value", "unit", "floor", "ratio", "target", "met", "n")]
        for f in self.figures:
            if f.status != "measured":
                rows.append((f.id, f.status, f.unit, "", "", _target(f), "", ""))
                continue
            rows.append((f.id, _fmt(f.value), f.unit, _fmt(f.floor), _fmt(f.ratio, "×"),
                         _target(f), {True: "yes", False: "NO", None: "-"}[f.met], str(f.repeats)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def markdown(self, doc: dict[str, Any]) -> str:
        """The table as Markdown, headed by the date and machine (for the READMEs)."""
        m = doc["machine"]
        head = (f"{doc['date'][:10]} · `nproc` {m['nproc']} · {m['cpu']} · Python {m['python']} · "
                f"{doc.get('redis_binary', '').rsplit('/', 1)[-1]} {doc.get('redis_version', '')} · "
                f"load average at start {m['loadavg_at_start']}, at the end {m.get('loadavg_at_end', '?')} · "
                f"{doc['elapsed_s']:.0f} s")
        rows = ["| id | what | value | floor | ratio | target | met |", "|---|---|---|---|---|---|---|"]
        for f in self.figures:
            if f.status != "measured":
                why = f.details.get("why") or f.details.get("error") or ""
                rows.append(f"| {f.id} | {f.what} | {f.status} | | | {_target(f)} | {why} |")
                continue
            value = f"{_fmt(f.value)} {f.unit}"
            floor = f"{_fmt(f.floor)} {f.unit}" if f.floor is not None else ""
            met = {True: "yes", False: "**no**", None: "–"}[f.met]
            rows.append(f"| {f.id} | {f.what} | {value} | {floor} | {_fmt(f.ratio, '×')} | {_target(f)} | {met} |")
        return head + "\n\n" + "\n".join(rows) + "\n"

    def write(self, extra: dict[str, Any], stem: str = "latest") -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        now = datetime.now(timezone.utc)
        doc = {"date": now.isoformat(timespec="seconds"), "machine": self.machine(),
               "argv": self.argv, "elapsed_s": round(time.time() - self.started, 1),
               "notes": self.notes, **extra,
               "figures": [f.as_json() for f in self.figures]}
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        latest = RESULTS / f"{stem}.json"
        latest.write_text(text)
        (RESULTS / f"{stem}.md").write_text(self.markdown(doc))
        (RESULTS / f"{now.strftime('%Y-%m-%dT%H%M%SZ')}-{stem}.json").write_text(text)
        return latest


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


def _fmt(v: float | None, suffix: str = "") -> str:
    if v is None:
        return ""
    if abs(v) >= 100:
        return f"{v:,.0f}{suffix}"
    return f"{v:.3g}{suffix}"


def _target(f: Figure) -> str:
    if f.rule == "check":
        return str(f.details.get("target", "see details"))
    if f.target is None or f.rule == "info":
        return "-"
    op = "≤" if f.rule.endswith("<=") else "≥"
    what = "" if f.rule.startswith("value") else "×"
    unit = f" {f.unit}" if f.rule.startswith("value") else ""
    return f"{op} {f.target:g}{what}{unit}"


def asdict_spec(obj: Any) -> dict[str, Any]:
    return asdict(obj)
