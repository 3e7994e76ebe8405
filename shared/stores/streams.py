"""Event streams, for runs and DAGs alike: the seq-guarded publish and the cursor reads.

A run (``reactq:run:{id}``) and a DAG (``reactq:dag:{id}``) each keep a hash whose
``pub_seq`` field is the last event seq already on their events stream. Publishing skips
every event whose seq is not above it, so an event is on the stream exactly once however
often the step that made it is retried. Readers page through
the stream by stream id, which is what SSE clients send back as ``Last-Event-ID``.
"""

from __future__ import annotations

from typing import Any, cast

import redis

from reactq.shared.events import Event, dumps

#: A Lua function for scripts that publish: appends the ``(seq, channel, data)`` triples of
#: ARGV from index ``first`` on to ``stream`` (capped near ``maxlen``), skipping seqs that
#: ``hash``'s ``pub_seq`` already covers; returns the new ``pub_seq``. Prepend it to a
#: script's body (the run and DAG commit scripts publish with the same code).
#: ``append(stream, maxlen, first, last)``: the event triples from ``ARGV[first]`` whose seq is
#: above ``last`` (the hash's ``pub_seq``) go on the stream; returns the new ``pub_seq`` (the
#: caller writes it). ``publish`` reads and writes ``pub_seq`` itself.
PUBLISH_FN = """
local function append(stream, maxlen, first, last)
  for i = first, #ARGV, 3 do
    local seq = tonumber(ARGV[i])
    if seq > last then
      redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'event', ARGV[i+1], 'data', ARGV[i+2])
      last = seq
    end
  end
  return last
end
local function publish(hash, stream, maxlen, first)
  local last = append(stream, maxlen, first, tonumber(redis.call('HGET', hash, 'pub_seq') or '0'))
  redis.call('HSET', hash, 'pub_seq', last)
  return last
end
"""

#: KEYS: hash, events stream. ARGV: maxlen, then event triples. Returns the new ``pub_seq``.
PUBLISH = PUBLISH_FN + """
return publish(KEYS[1], KEYS[2], ARGV[1], 2)
"""

#: One stream entry as redis-py returns it: (entry id, fields), bytes or str by the client.
Entry = tuple[Any, dict[Any, Any]]


def text(value: Any) -> str:
    """A Redis reply value as text (clients may or may not decode responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def triples(events: list[Event]) -> list[Any]:
    """The events as the flat ``seq, channel, data`` ARGV that ``PUBLISH_FN`` reads."""
    out: list[Any] = []
    for e in events:
        out += [e.seq, e.channel, dumps(e.data)]
    return out


def entries_after(r: redis.Redis, key: str, cursor: str | None, *, count: int | None = None) -> list[Entry]:
    """The entries of ``key`` after stream id ``cursor`` (None = from the start)."""
    raw = r.xrange(key, min=f"({cursor}" if cursor else "-", max="+", count=count)
    return cast(list[Entry], raw)


def read_events(r: redis.Redis, key: str, after: str | None = None, *, block_ms: int | None = None,
                count: int = 500) -> list[tuple[str, Event]]:
    """Events after stream id ``after`` (None = from the start); with ``block_ms``, wait up to
    that long for the first one to arrive (XREAD BLOCK)."""
    if block_ms is None:
        entries = entries_after(r, key, after, count=count)
    else:
        res = cast(list[tuple[Any, list[Entry]]], r.xread({key: after or "0-0"}, block=block_ms, count=count))
        entries = res[0][1] if res else []
    return [(text(i), Event.from_fields(f)) for i, f in entries]
