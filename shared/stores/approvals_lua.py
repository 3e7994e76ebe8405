"""The approval scripts (``shared/stores/approvals.py``).

Every script's KEYS are the keys of ONE run (one Redis Cluster slot), then, single server
only, the ``due`` set and the approval inbox (other slots: on a cluster the caller writes
them right after). Approval records live in the run's tool ledger (``run:{id}:tools``,
field ``approval:<approval_id>``), so they expire with the run and never before it.

An event these scripts publish takes the seq after the run's ``pub_seq``: they only run
while the run's turn is out (its state's seq is then ``pub_seq``; the step that takes the
fan-in starts from ``pub_seq``), and they refuse once the run is asked to stop (the
stopping step would otherwise publish over the same seqs).
"""

from __future__ import annotations

#: ``append_event(hash, stream, maxlen, channel, data)``: publish ``data`` (a JSON object
#: without its seq) as the run's next event; returns its seq.
APPEND_FN = """
local function append_event(hash, stream, maxlen, channel, data)
  local seq = tonumber(redis.call('HGET', hash, 'pub_seq') or '0') + 1
  local body = string.sub(data, 1, -2) .. ',"seq":' .. seq .. '}'
  redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'event', channel, 'data', body)
  redis.call('HSET', hash, 'pub_seq', seq)
  return seq
end
"""

# KEYS: run hash, tools ledger, events, the turn's fan-in set; single server only: due set,
# inbox. ARGV: [1] call id, [2] the claim's token, [3] the call's waiting ledger record,
# [4] the approval's field, [5] the approval record, [6] the event's data, [7] maxlen,
# [8] calls in the turn, [9] tool member, [10] run member, [11] approval member,
# [12] expiry ms, [13] inbox member, [14] requested ms, [15] now, [16] 1 when KEYS[5] is
# the due set. The call must still be this task's claim (``pending`` with its token; ''
# takes over the claim of a delivery that died before it asked, which ran nothing: never
# one that carries an approval), and the run not asked to stop. The call then waits: no due member of its own nor of the run
# (the approval's, at its expiry, covers both), the fan-in set kept while it waits, the run
# ``waiting`` once nothing else of its turn is out. Returns {1, old status, new status,
# created_at}, {0} when the claim is not ours, {-1} when the run is asked to stop.
REQUEST = APPEND_FN + """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return {0} end
local c = cjson.decode(cur)
if c['status'] ~= 'pending' or c['approved'] or (ARGV[2] ~= '' and c['token'] ~= ARGV[2]) then return {0} end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return {-1} end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3], ARGV[4], ARGV[5])
local w = redis.call('HINCRBY', KEYS[1], 'waiting', 1)
redis.call('PERSIST', KEYS[4])
local old = redis.call('HGET', KEYS[1], 'status') or ''
local new = old
if redis.call('SCARD', KEYS[4]) + w >= tonumber(ARGV[8]) then
  new = 'waiting'
  redis.call('HSET', KEYS[1], 'status', new, 'updated_at', ARGV[15])
end
append_event(KEYS[1], KEYS[3], ARGV[7], 'approval', ARGV[6])
if ARGV[16] == '1' then
  redis.call('ZREM', KEYS[5], ARGV[9], ARGV[10])
  redis.call('ZADD', KEYS[5], ARGV[12], ARGV[11])
  redis.call('ZADD', KEYS[6], ARGV[14], ARGV[13])
end
return {1, old, new, redis.call('HGET', KEYS[1], 'created_at') or ''}
"""

# KEYS: as for REQUEST. ARGV: [1] call id, [2] the approval's field, [3] the digest the
# decider saw ('' = any: expiry), [4] the decided record, [5] the event's data, [6] maxlen,
# [7] 'run' (approve, edit) or 'answer' (reject, respond), [8] the call's ledger record
# (``approved``, or ``done`` with its answer), [9] calls in the turn, [10] the turn's step_no,
# [11] tool member, [12] run member, [13] approval member, [14] deadline ms, [15] inbox
# member, [16] fan-in ttl, [17] now, [18] 1 when KEYS[5] is the due set, [19] the call's
# ``step`` event that follows the decision ('' none: ``callevents``).
# The decision and what it makes due, in one script: the call (due to run) or the run's
# next step (an answered call completes the turn). Returns {1, '', old status, new status,
# 1 when the turn is complete, created_at}; {0} unknown approval; {2, record} already
# decided; {3, record} another digest; {4, record} the run is asked to stop.
DECIDE = APPEND_FN + """
local rec = redis.call('HGET', KEYS[2], ARGV[2])
if not rec then return {0} end
local a = cjson.decode(rec)
if a['status'] ~= 'pending' then return {2, rec} end
if ARGV[3] ~= '' and a['args_digest'] ~= ARGV[3] then return {3, rec} end
local st = redis.call('HGET', KEYS[1], 'status')
if redis.call('HGET', KEYS[1], 'cancel') == '1' or st == 'succeeded' or st == 'failed' or st == 'cancelled' then
  return {4, rec}
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[4], ARGV[1], ARGV[8])
local w = redis.call('HINCRBY', KEYS[1], 'waiting', -1)
if w < 0 then
  w = 0
  redis.call('HSET', KEYS[1], 'waiting', 0)
end
local n = tonumber(ARGV[9])
local ready = 0
if ARGV[7] == 'answer' then
  redis.call('SADD', KEYS[4], ARGV[1])
  if redis.call('SCARD', KEYS[4]) >= n and tonumber(redis.call('HGET', KEYS[1], 'step_no') or '-1') == tonumber(ARGV[10]) then
    ready = 1
  end
end
local c = redis.call('SCARD', KEYS[4])
if w > 0 then redis.call('PERSIST', KEYS[4]) elseif c > 0 then redis.call('EXPIRE', KEYS[4], ARGV[16]) end
local old = redis.call('HGET', KEYS[1], 'status') or ''
local new = 'running'
if w > 0 and c + w >= n then new = 'waiting' end
redis.call('HSET', KEYS[1], 'status', new, 'updated_at', ARGV[17])
append_event(KEYS[1], KEYS[3], ARGV[6], 'approval', ARGV[5])
if ARGV[19] ~= '' then append_event(KEYS[1], KEYS[3], ARGV[6], 'step', ARGV[19]) end
if ARGV[18] == '1' then
  redis.call('ZREM', KEYS[5], ARGV[13])
  redis.call('ZREM', KEYS[6], ARGV[15])
  if ARGV[7] == 'run' then redis.call('ZADD', KEYS[5], ARGV[14], ARGV[11]) end
  if ready == 1 then redis.call('ZADD', KEYS[5], ARGV[14], ARGV[12]) end
end
return {1, '', old, new, ready, redis.call('HGET', KEYS[1], 'created_at') or ''}
"""

# KEYS: tools ledger, run hash; single server only: due set, inbox. ARGV: [1] 1 when KEYS[3]
# is the due set, then 4 × (field, the cancelled record, approval member, inbox member).
# The run has ended: each approval still pending is ``cancelled`` and its members dropped.
# Returns how many were.
CANCEL = """
local n = 0
for i = 2, #ARGV, 4 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if cur and cjson.decode(cur)['status'] == 'pending' then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    n = n + 1
  end
  if ARGV[1] == '1' then
    redis.call('ZREM', KEYS[3], ARGV[i + 2])
    redis.call('ZREM', KEYS[4], ARGV[i + 3])
  end
end
redis.call('HSET', KEYS[2], 'waiting', 0)
return n
"""

# KEYS: run hash, tools ledger, events. ARGV: [1] call id, [2] the turn's step_no, [3] maxlen,
# [4] the ``step`` event's data. A call's own event in a turn with held calls (``callevents``):
# published while its turn is current, the run is not asked to stop and the call is not done
# (its ``iteration done`` goes out before its close counts it in, so the fan-in's step, which
# starts from ``pub_seq``, comes after it). Returns its seq, 0 when not published.
ANNOUNCE = APPEND_FN + """
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'step_no') or '-1') ~= tonumber(ARGV[2]) then return 0 end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and cjson.decode(cur)['status'] == 'done' then return 0 end
return append_event(KEYS[1], KEYS[3], ARGV[3], 'step', ARGV[4])
"""
