"""Live terminal rendering of a run's events (``reactq run`` / ``reactq watch``).

One line per thinking step and per tool call (name, arguments, observation cut to a
screenful, elapsed), then the answer streaming token by token, then a footer with the final
status, iterations, tokens and time. ``--json`` bypasses all of this (``json_line``).

Tool calls of one turn run in parallel, so a tool's line is printed when it *finishes*
(with its arguments), not when it starts; on a terminal a spinner says what is in flight.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from reactq.shared.events import Event, dumps


def json_line(stream_id: str | None, event: Event) -> str:
    """The ``--json`` form of one event: ``{"id", "event", "data"}`` on one line."""
    return json.dumps({"id": stream_id, "event": event.channel, "data": event.data},
                      ensure_ascii=False)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: max(1, limit - 1)] + "…"


def screenful(text: str, *, lines: int, width: int) -> str:
    """At most ``lines`` lines of at most ``width`` characters: a long observation must
    not scroll the run's history off the screen."""
    out: list[str] = []
    for line in str(text).splitlines() or [""]:
        out.append(line if len(line) <= width else line[: max(1, width - 1)] + "…")
        if len(out) >= lines:
            break
    total = len(str(text).splitlines())
    if total > len(out):
        out.append(f"… ({total - len(out)} more lines)")
    return "\n".join(out)


def plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def stamp(stream_id: str | None) -> float:
    """Seconds since the epoch: from a Redis stream id (``<ms>-<n>``), else now."""
    if stream_id:
        head = stream_id.split("-", 1)[0]
        if head.isdigit():
            return int(head) / 1000
    return time.time()


def fmt_tokens(usage: dict[str, Any] | None) -> str:
    if not usage:
        return "0 tokens"
    total = int(usage.get("total_tokens") or 0)
    return f"{total:,} tokens ({int(usage.get('prompt_tokens') or 0):,} in / {int(usage.get('completion_tokens') or 0):,} out)"


class RunRenderer:
    """Turns events into terminal output. Feed it with ``handle``; call ``close`` at the end."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.now = time.time()
        self.thinking_started: float | None = None
        self.in_answer = False
        self.answer_streamed = False
        self.final: dict[str, Any] | None = None
        self._status: Status | None = None

    # -- spinner (terminals only: in a pipe it would only add noise) ---------------------
    def _spin(self, text: str) -> None:
        if not self.console.is_terminal:
            return
        if self._status is None:
            self._status = self.console.status(text, spinner="dots")
            self._status.start()
        else:
            self._status.update(text)

    def _stop_spin(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        self._stop_spin()
        if self.in_answer:
            self.console.file.write("\n")
            self.console.file.flush()
            self.in_answer = False

    # -- events -------------------------------------------------------------------------
    def handle(self, event: Event, stream_id: str | None = None) -> None:
        """Render one event. A Redis stream id carries the time the event was published (ms),
        so durations are right even when replaying a finished run (``reactq watch``)."""
        self.now = stamp(stream_id)
        d = event.data
        handler = getattr(self, f"_on_{event.channel}", None)
        if handler is not None:
            handler(d)

    def _line(self, tag: str, style: str, text: str) -> None:
        self._stop_spin()
        self.console.print(f"[{style}]{tag:>7}[/]  {text}", highlight=False, soft_wrap=False)

    def _on_step(self, d: dict[str, Any]) -> None:
        kind, status = d.get("type"), d.get("status")
        if kind == "thinking" and status == "start":
            self.thinking_started = self.now
            self._spin(f"thinking (iteration {d.get('iteration')})…")
        elif kind == "thinking" and status == "done":
            took = self.now - (self.thinking_started or self.now)
            reasoning = one_line(d.get("reasoning") or "", self.console.width - 30)
            reasoning = escape(reasoning) if reasoning else "[dim](no reasoning given)[/]"
            self._line("think", "cyan", f"#{d.get('iteration')} {reasoning} [dim]{took:.2f}s[/]")
        elif kind == "iteration" and status == "start":
            self._spin(f"running {d.get('tool_name')}…")
        elif kind == "iteration" and status == "done":
            self._tool_done(d)
        elif kind == "answer" and status == "start":
            self._spin("writing the answer…")

    def _tool_done(self, d: dict[str, Any]) -> None:
        width = max(20, self.console.width)
        args = one_line(dumps(d.get("tool_args") or {}), max(20, width // 2))
        elapsed = d.get("iter_elapsed")
        took = f" [dim]{float(elapsed):.2f}s[/]" if isinstance(elapsed, (int, float)) else ""
        err = d.get("error")
        mark, style = ("✗", "red") if err else ("→", "green")
        self._line("tool", style, f"[bold]{escape(str(d.get('tool_name')))}[/] {escape(args)}{took}")
        obs = d.get("observation")
        text = str(err if err and not obs else obs or "")
        lines = max(3, self.console.height - 6)
        for i, line in enumerate(screenful(text, lines=lines, width=width - 12).splitlines()):
            lead = f"{mark} " if i == 0 else "  "
            self.console.print(f"{'':>7}  [{style}]{lead}[/]{escape(line)}", highlight=False,
                               soft_wrap=False)

    def _on_answer(self, d: dict[str, Any]) -> None:
        status = d.get("status")
        if status == "start":
            self._stop_spin()
            self.console.rule("[bold]answer", style="dim")
            self.in_answer = True
        elif status == "delta":
            # Raw writes: each token appears as it arrives, with no re-wrapping by rich.
            self.console.file.write(str(d.get("content") or ""))
            self.console.file.flush()
            self.answer_streamed = True
        elif status == "done":
            self.close()

    def _on_inject(self, d: dict[str, Any]) -> None:
        self._line("you", "magenta", escape(one_line(d.get("content") or "", self.console.width - 12)))

    def _on_compact(self, d: dict[str, Any]) -> None:
        self._line("compact", "yellow", f"history {d.get('original_messages')} → {d.get('kept_messages')} messages")

    def _on_phase(self, d: dict[str, Any]) -> None:
        if d.get("phase") == "selecting_tools":
            self._line("select", "blue", f"choosing tools among {d.get('total_tools')}")
        elif d.get("phase") == "output_repair":
            problems = "; ".join(str(p) for p in d.get("problems") or [])
            self._line("repair", "yellow", f"answer {d.get('attempt')} not valid: {escape(one_line(problems, 200))}")
        elif d.get("phase") == "rate_limited":
            self._line("wait", "yellow", f"model {escape(str(d.get('model')))} is at its limits; "
                                         f"waiting ≈ {d.get('wait_s')}s (no worker held)")
        else:
            self._line("phase", "blue", escape(str(d.get("phase"))))

    def _on_guardrail(self, d: dict[str, Any]) -> None:
        decision = str(d.get("decision"))
        style = {"blocked": "red", "rewritten": "yellow"}.get(decision, "dim")
        why = f": {escape(str(d['message']))}" if d.get("message") else ""
        self._line("guard", style, f"{escape(str(d.get('guardrail')))} {decision} the "
                                   f"{'query' if d.get('point') == 'run_start' else 'answer'}{why}")

    def _on_error(self, d: dict[str, Any]) -> None:
        self._line("error", "red", f"[{escape(str(d.get('kind') or 'error'))}] {escape(str(d.get('message')))}")

    def _on_done(self, d: dict[str, Any]) -> None:
        self.close()
        self.final = d
        if not self.answer_streamed and d.get("answer"):
            self.console.rule("[bold]answer", style="dim")
            self.console.print(str(d["answer"]), markup=False, highlight=False)
        status = str(d.get("status"))
        style = "green" if status == "succeeded" else "red"
        elapsed = d.get("elapsed")
        took = f"{float(elapsed):.2f}s" if isinstance(elapsed, (int, float)) else "?"
        self.console.rule(
            f"[{style}]{status}[/] · {plural(d.get('iterations'), 'iteration')} · "
            f"{fmt_tokens(d.get('usage'))} · {took}", style="dim")
