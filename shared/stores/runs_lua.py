"""The run store's Lua scripts (``shared/stores/runs.py``, ``shared/stepstore.py``).

Every script's KEYS are the keys of ONE run (one Redis Cluster slot), except the extras
marked "single server only": the ``due`` set and the metric hashes live in other slots, so on
a cluster the caller leaves them out and writes them right after (``keys.py``, rule 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reactq.shared.stores.roundtrip import Op
from reactq.shared.stores.streams import PUBLISH_FN

#: The commands ``OPS_FN`` applies (what metrics write).
HASH_OPS = ("HINCRBY", "HINCRBYFLOAT", "HSET", "HDEL")


def inline_ops(ops: Sequence[Op]) -> tuple[list[str], list[Any]]:
    """``ops`` (hash commands) as the extra KEYS and the ARGV that ``OPS_FN`` reads."""
    keys: list[str] = []
    args: list[Any] = [len(ops)]
    for op in ops:
        if op.script is not None or op.args[0] not in HASH_OPS:
            raise ValueError(f"not a hash write a commit can carry: {op}")
        cmd, key, field, *value = op.args
        if key not in keys:
            keys.append(key)
        args += [cmd, keys.index(key) + 1, field, value[0] if value else ""]
    return keys, args

#: ``apply_ops(first_key, first_arg, apply)``: the hash writes a step's commit carries when it
#: wins (metrics): from ``ARGV[first_arg]``, a count m, then m × (command, key index, field,
#: value), the key being ``KEYS[first_key - 1 + index]`` (``inline_ops`` encodes them).
#: Applies them when ``apply``; returns the ARGV index after them.
OPS_FN = """
local function apply_ops(first_key, first_arg, apply)
  local m = tonumber(ARGV[first_arg])
  for i = 0, m - 1 do
    local at = first_arg + 1 + 4 * i
    local cmd, key = ARGV[at], KEYS[first_key - 1 + tonumber(ARGV[at + 1])]
    -- pcall: a metric that cannot be written (a key of another type) never fails the step
    if apply and cmd == 'HDEL' then
      redis.pcall('HDEL', key, ARGV[at + 2])
    elseif apply and (cmd == 'HINCRBY' or cmd == 'HINCRBYFLOAT' or cmd == 'HSET') then
      redis.pcall(cmd, key, ARGV[at + 2], ARGV[at + 3])
    end
  end
  return first_arg + 1 + 4 * m
end
"""

# KEYS: run hash, events, interrupts, tools ledger (one run: one slot); then, single server
# only, the due set and the keys of the ops. ARGV: [1] expected step_no, [2] state, [3] new
# step_no, [4] status, [5] result ('' = none), [6] now, [7] ttl (0 = keep), [8] maxlen,
# [9] turn ('' = none), [10] when the turn began ('' = unknown), [11] the interrupt cursor
# ('' = none), [12] 1 when KEYS[5] is the due set, [13] n, [14] run member, n × (deadline,
# member) (n = 0: the run is over, remove its member), then the ops (OPS_FN, from KEYS[6]),
# then the pushes: a count p, then p × (key index, payload) (single server only: the broker's
# messages of what comes next, ``LPUSH``ed when the commit wins), then event triples.
# Returns {last published seq, the status before, created_at}, or -1 when stale. The run index's status sets live in other slots: the caller moves the run
# between them after the commit (see RunStore.commit).
COMMIT = PUBLISH_FN + OPS_FN + """
-- one read and one write of the run hash: every command counts on the hot path
local cur = redis.call('HMGET', KEYS[1], 'step_no', 'status', 'created_at', 'pub_seq', 'turn')
if tonumber(cur[1] or '-1') ~= tonumber(ARGV[1]) then return -1 end
local n = tonumber(ARGV[13])
local pushes = apply_ops(6, 15 + 2 * n, true)
local p = tonumber(ARGV[pushes])
local events = pushes + 1 + 2 * p
local old = cur[2] or ''
local created = cur[3] or ARGV[6]
local last = append(KEYS[2], ARGV[8], events, tonumber(cur[4] or '0'))
local f = {'state', ARGV[2], 'step_no', ARGV[3], 'status', ARGV[4], 'updated_at', ARGV[6], 'pub_seq', last}
if ARGV[5] ~= '' then table.insert(f, 'result') table.insert(f, ARGV[5]) end
if ARGV[9] ~= '' then
  for _, v in ipairs({'turn', ARGV[9], 'turn_began', ARGV[10]}) do table.insert(f, v) end
elseif cur[5] then
  redis.call('HDEL', KEYS[1], 'turn', 'turn_began')
end
if ARGV[11] ~= '' then table.insert(f, 'icursor') table.insert(f, ARGV[11]) end
redis.call('HSET', KEYS[1], unpack(f))
if ARGV[12] == '1' then
  if n == 0 then
    redis.call('ZREM', KEYS[5], ARGV[14])
  else
    redis.call('ZADD', KEYS[5], unpack(ARGV, 15, 14 + 2 * n))
  end
end
local ttl = tonumber(ARGV[7])
if ttl > 0 then
  for k = 1, 4 do redis.call('EXPIRE', KEYS[k], ttl) end
end
for i = 0, p - 1 do
  redis.call('LPUSH', KEYS[tonumber(ARGV[pushes + 1 + 2 * i])], ARGV[pushes + 2 + 2 * i])
end
return {last, old, created}
"""

# KEYS: run hash, interrupts, tools ledger. What a step needs, in one call: the run hash,
# the interrupts after the committed cursor (``icursor``; all of them for a run committed
# before that field existed: the caller filters by its state's cursor), and the ledger
# records of the pending turn's calls. Returns {hash as a flat list, interrupt entries,
# call ids, their ledger records (false = none)}.
LOAD = """
local h = redis.call('HGETALL', KEYS[1])
local cursor, turn = nil, nil
for i = 1, #h, 2 do
  if h[i] == 'icursor' then cursor = h[i + 1] elseif h[i] == 'turn' then turn = h[i + 1] end
end
if #h == 0 then return {h, {}, {}, {}} end
local start = '-'
if cursor and cursor ~= '' then start = '(' .. cursor end
local ints = redis.call('XRANGE', KEYS[2], start, '+')
local ids, recs = {}, {}
if turn then
  for _, c in ipairs(cjson.decode(turn)['calls']) do table.insert(ids, c['id']) end
  if #ids > 0 then recs = redis.call('HMGET', KEYS[3], unpack(ids)) end
end
return {h, ints, ids, recs}
"""

# KEYS: run hash, interrupts. ARGV: the interrupt cursor ('' = from the start). A step's
# read after its LLM call: {interrupt entries after the cursor, the cancel flag}.
AFTER_LLM = """
local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] end
return {redis.call('XRANGE', KEYS[2], start, '+'), redis.call('HGET', KEYS[1], 'cancel') or '0'}
"""

# KEYS: run hash, tools ledger, then (single server only) the call's lease key. ARGV: the
# turn's step_no, call id, the pending record, the lease token. A tool task's start: returns
# {the pending turn, the call's ledger record before this call}; when there was none, or it
# is ``approved`` (a person's decision made the call due), the turn is current and names the
# call (and this task holds the lease, when the lease key is given), the call is claimed
# (the pending record is written, carrying the approved record).
OPEN_CALL = """
local turn = redis.call('HGET', KEYS[1], 'turn')
local rec = redis.call('HGET', KEYS[2], ARGV[2])
if not turn then return {turn, rec} end
if rec and cjson.decode(rec)['status'] ~= 'approved' then return {turn, rec} end
local t = cjson.decode(turn)
if tonumber(t['step_no']) ~= tonumber(ARGV[1]) then return {turn, rec} end
local named = false
for _, c in ipairs(t['calls']) do if c['id'] == ARGV[2] then named = true end end
if not named then return {turn, rec} end
if #KEYS >= 3 and redis.call('GET', KEYS[3]) ~= ARGV[4] then return {turn, rec} end
local claim = ARGV[3]
if rec then claim = string.sub(ARGV[3], 1, -2) .. ',"approved":' .. rec .. '}' end
redis.call('HSET', KEYS[2], ARGV[2], claim)
return {turn, rec}
"""

#: ``fan_in(set, run, due, call, ttl, tool, member, calls, deadline, step_no, hold)``: counts
#: ``call`` into the turn's fan-in ``set`` (the run hash ``run``); the call stops being due and,
#: once the turn's ``calls`` are all in and the turn (``step_no``) is still current, the run's
#: next step is due at ``deadline`` (``due``: the due set, false on a cluster: the caller writes
#: it). With ``hold``, while calls of the run wait for a person (its ``waiting`` field) the set
#: is kept (no TTL) and the run is ``waiting`` once nothing else of its turn is out; otherwise
#: the set expires after ``ttl``. Returns the set's size, 1 when the turn is complete and
#: current, 1 when the run became ``waiting``.
FANIN_FN = """
local function fan_in(set, run, due, call, ttl, tool, member, calls, deadline, step_no, hold)
  redis.call('SADD', set, call)
  local c = redis.call('SCARD', set)
  local h = redis.call('HMGET', run, 'step_no', 'waiting')
  local w = 0
  if hold then w = tonumber(h[2] or '0') end
  local waiting = 0
  if w > 0 then
    redis.call('PERSIST', set)
    if c + w >= calls and redis.call('HGET', run, 'status') == 'running' then
      redis.call('HSET', run, 'status', 'waiting')
      waiting = 1
    end
  else
    redis.call('EXPIRE', set, ttl)
  end
  local ready = 0
  if c >= calls and tonumber(h[1] or '-1') == tonumber(step_no) then
    ready = 1
  end
  if due then
    redis.call('ZREM', due, tool)
    if ready == 1 then redis.call('ZADD', due, deadline, member) end
  end
  return c, ready, waiting
end
"""

# KEYS: tools ledger, fan-in set, run hash; then, single server only, the due set and the
# keys of the ops. ARGV: [1] call id, [2] the done record ('' = the call was already done:
# only count it in), [3] fan-in ttl, [4] tool member, [5] run member, [6] calls in the turn,
# [7] deadline ms, [8] the turn's step_no, [9] 1 when KEYS[4] is the due set, then the ops
# (OPS_FN, from KEYS[5]: applied only when this record is the call's first "done"), then a
# push: 0, or 1, a key index and a payload (single server only: the fan-in's broker message,
# ``LPUSH``ed once the turn's calls are all in). The first "done" wins (a stale worker that
# finishes a call another one already finished is refused); then the call is counted in
# (``fan_in``, holding the set while calls wait for a person). Returns {1 when this record won,
# the fan-in count, 1 when the turn is complete and current, 1 when the run became ``waiting``}.
CLOSE_CALL = OPS_FN + FANIN_FN + """
local won = 0
if ARGV[2] ~= '' then
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if not (cur and cjson.decode(cur)['status'] == 'done') then won = 1 end
end
local push = apply_ops(5, 10, won == 1)
if won == 1 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
local due = false
if ARGV[9] == '1' then due = KEYS[4] end
local c, ready, waiting = fan_in(KEYS[2], KEYS[3], due, ARGV[1], ARGV[3], ARGV[4], ARGV[5],
                                 tonumber(ARGV[6]), ARGV[7], ARGV[8], true)
if tonumber(ARGV[push] or '0') == 1 and c >= tonumber(ARGV[6]) then
  redis.call('LPUSH', KEYS[tonumber(ARGV[push + 1])], ARGV[push + 2])
end
return {won, c, ready, waiting}
"""

# KEYS: tools ledger. ARGV: call id, the done record. The first "done" wins: a stale worker
# (partitioned, then back) that finishes a call another worker already finished is refused.
LEDGER_DONE = """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and cjson.decode(cur)['status'] == 'done' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: fan-in set, run hash, then the due set (single server only, as for COMMIT).
# ARGV: call id, ttl, tool member, run member, calls in the turn, deadline ms, the turn's
# step_no. Returns {the set's size, 1 when the turn is complete and still current, 1 when the
# run became ``waiting``}. The call is no longer due; once the turn is complete (and current)
# the run's next step is (``fan_in``, holding the set while calls wait for a person, as
# CLOSE_CALL does: a call given up on may be the last one out besides those).
FANIN = FANIN_FN + """
local due = false
if #KEYS >= 3 then due = KEYS[3] end
local c, ready, waiting = fan_in(KEYS[1], KEYS[2], due, ARGV[1], ARGV[2], ARGV[3], ARGV[4],
                                 tonumber(ARGV[5]), ARGV[6], ARGV[7], true)
return {c, ready, waiting}
"""
