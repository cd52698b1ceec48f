"""The leader's Redis writes, each checked inside Redis against the leader's lock token.

A leader frozen (SIGSTOP, a long GC, a partition) past its lease wakes up believing it
still leads; PostgreSQL fences its transactions by epoch, and this module fences its
Redis writes the same way: every script first compares `lock:<name>` with the token this
leader took it with, and writes nothing (returning -1, raised here as `LeaseLost`) when
another process holds the lease or nobody does. The broker pushes make the same check
from the client, made atomic with the push by WATCH and MULTI/EXEC (`push_messages`).

Jobs index writes follow the rule of `core/index.py`: the leader moves a score later, or
removes a member, only if the score is still the one it read (compare-and-set), so it
never undoes an edit written meanwhile; it adds or lowers scores like everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import WatchError

from core.keys import index_built_key, index_key, runs_index_key
from core.redis import KeyedScript, pipeline_eval

from .lease import LeaseLost
from .messages import by_queue
from .messages import push_messages as queue_lpushes

# KEYS[1] lock, KEYS[2] zset; ARGV[1] token; then (member, expected, new) triples where
# '' means "absent" (expected) or "remove" (new). Returns 1/0 per triple (applied or not).
_CAS = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local applied = {}
for i = 2, #ARGV, 3 do
  local m, expected, new = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local current = redis.call('ZSCORE', KEYS[2], m)
  local ok
  if expected == '' then ok = (current == false)
  else ok = (current ~= false and tonumber(current) == tonumber(expected)) end
  if ok then
    if new == '' then redis.call('ZREM', KEYS[2], m) else redis.call('ZADD', KEYS[2], new, m) end
    applied[#applied + 1] = 1
  else
    applied[#applied + 1] = 0
  end
end
return applied
"""

# KEYS[1] lock, KEYS[2] the key; ARGV[1] token, ARGV[2] the command, then its arguments.
_FENCED = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local command = ARGV[2]
if command ~= 'LPUSH' and command ~= 'ZREM' and command ~= 'ZADDLT' and command ~= 'ZADDXXGT' then
  return redis.error_reply('command not allowed: ' .. command)
end
if command == 'ZADDLT' then return redis.call('ZADD', KEYS[2], 'LT', unpack(ARGV, 3)) end
if command == 'ZADDXXGT' then return redis.call('ZADD', KEYS[2], 'XX', 'GT', unpack(ARGV, 3)) end
return redis.call(command, KEYS[2], unpack(ARGV, 3))
"""

# A rebuild's progress (`beat/rebuild.py`). KEYS[1] lock, KEYS[2] the rebuild's state hash,
# KEYS[3] the built flag; ARGV[1] token, ARGV[2] the rebuild id, ARGV[3] the operation:
# 'start' (replace the state with ARGV[4..] field/value pairs), 'set' (fields, only while
# the state is still this rebuild's), 'finish' (built := id and the state goes, same
# condition). Returns 1, 0 (the state is gone or another rebuild's) or -1 (not the leader).
_REBUILD_STATE = """
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local op = ARGV[3]
if op == 'start' then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'id', ARGV[2], unpack(ARGV, 4))
  return 1
end
if redis.call('HGET', KEYS[2], 'id') ~= ARGV[2] then return 0 end
if op == 'set' then redis.call('HSET', KEYS[2], unpack(ARGV, 4)) return 1 end
if op == 'finish' then
  redis.call('SET', KEYS[3], ARGV[2])
  redis.call('DEL', KEYS[2])
  return 1
end
return redis.error_reply('unknown operation: ' .. op)
"""

CHUNK = 3000  # arguments per script call, well under Lua's unpack limit (~8000)


@dataclass(frozen=True)
class Cas:
    """Move `member` from score `expected` (None: absent) to `new` (None: remove)."""

    member: str
    expected: float | None
    new: float | None


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


class FencedRedis:
    """The leader's writes. `token` None: unfenced (benchmarks that drive an engine
    without a lease)."""

    def __init__(self, client, lock_key: str, token: str | None, partition: int = 0) -> None:
        self.client = client
        self.partition = partition
        self.index_key = index_key(partition)
        self.runs_index_key = runs_index_key(partition)
        self.index_built_key = index_built_key(partition)
        self.lock_key = lock_key
        self.token = token or ""
        self._cas = KeyedScript(_CAS)
        self._fenced = client.register_script(_FENCED)  # pipelined: see _pipe_fenced
        self._rebuild_state = KeyedScript(_REBUILD_STATE)

    def keepalive(self) -> None:
        """Between iterations: nothing to do on Redis (redis-py checks a pooled connection
        when it takes it); the RabbitMQ writes' override keeps their connection alive."""

    def close(self) -> None:
        """When the engine is dropped: the Redis connections are the process's pool; the
        RabbitMQ writes' override closes their own connection."""

    def _pipe_fenced(self, pipe, keys: list[str], args: list) -> None:
        """Queue one `_FENCED` call on `pipe`. On a cluster it goes as EVAL aimed at its
        keys' node (`pipeline_eval`): the script's text a few hundred bytes per chunk of up
        to thousands of arguments."""
        if isinstance(self.client, RedisCluster):
            pipeline_eval(self.client, pipe, _FENCED, keys, args)
        else:
            self._fenced(keys=keys, args=args, client=pipe)

    def _check(self, result) -> None:
        if result == -1:
            raise LeaseLost("another process holds the lease: this leader's write was refused")

    def cas_jobs(self, changes: list[Cas]) -> list[bool]:
        """Apply each change only where the member still has its expected score."""
        applied: list[bool] = []
        for start in range(0, len(changes), CHUNK):
            args: list[str] = [self.token]
            for change in changes[start : start + CHUNK]:
                args += [change.member, _num(change.expected), _num(change.new)]
            result = self._cas(keys=[self.lock_key, self.index_key], args=args, client=self.client)
            self._check(result)
            applied += [bool(flag) for flag in result]
        return applied

    def lower_jobs(self, scores: dict[str, float]) -> None:
        """Add or lower (never raise) job scores: the sweeps' repair write."""
        items = list(scores.items())
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(items), CHUNK // 2):
            args = [self.token, "ZADDLT"]
            for name, score in items[start : start + CHUNK // 2]:
                args += [repr(float(score)), name]
            self._pipe_fenced(pipe, [self.lock_key, self.index_key], args)
        for result in pipe.execute():
            self._check(result)

    def rebuild_state(
        self, state_key: str, rebuild_id: str, op: str, fields: dict[str, str] | None = None
    ) -> bool:
        """Write a rebuild's progress only while the state is still that rebuild's (see
        `_REBUILD_STATE`); False when it vanished (Redis emptied) or another replaced it."""
        args = [self.token, rebuild_id, op]
        for name, value in (fields or {}).items():
            args += [name, value]
        keys = [self.lock_key, state_key, self.index_built_key]
        result = self._rebuild_state(keys=keys, args=args, client=self.client)
        self._check(result)
        return result == 1

    def defer_runs(self, members: list[str], until: float) -> None:
        """Move runs-index members later (never earlier, never adding one): a failing
        tenant's entries must not stay at the head and fill every batch."""
        values: list = []
        for member in members:
            values += [repr(float(until)), member]
        self._command(self.runs_index_key, "ZADDXXGT", values)

    def remove_runs(self, members: list[str]) -> None:
        self._command(self.runs_index_key, "ZREM", members)

    def push_messages(self, messages: list[tuple[str, bytes]]) -> None:
        """LPUSH pre-built messages to their queues, fenced by the lease key.

        On one Redis the fence is first optimistic: WATCH the lock key, read it, and push
        in MULTI/EXEC, which Redis runs only if the key was not written since the WATCH.
        The fenced script makes the same check, but Redis copies each of its arguments
        into Lua and back: with messages of about a kilobyte that was 75% more server
        time per message (the fire's pushes are most of a burst's publication). The
        lease's own renewal writes the key too; a push it aborted (having pushed nothing)
        goes again through the script, which no write can abort, so a link slow enough
        for renewals to land inside every push still publishes. A cluster always uses the
        script (ADR 0029)."""
        if not messages:
            return  # (most fire chunks: their runs were all published early)
        if not self.token:  # unfenced (benchmarks that drive an engine by hand)
            pipe = self.client.pipeline(transaction=False)
            queue_lpushes(pipe, messages, CHUNK)
            pipe.execute()
        elif isinstance(self.client, RedisCluster) or not self._push_watched(messages):
            self._push_by_script(messages)

    def holds_lease(self, value: bytes | None) -> bool:
        """Whether `value`, read from the lock key, is this leader's token."""
        return value is not None and value.decode() == self.token

    def _push_watched(self, messages: list[tuple[str, bytes]]) -> bool:
        """The optimistic push: False if a write to the lock key aborted it."""
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(self.lock_key)
                if not self.holds_lease(pipe.get(self.lock_key)):
                    raise LeaseLost("another process holds the lease: this push was refused")
                pipe.multi()
                queue_lpushes(pipe, messages, CHUNK)
                pipe.execute()
                return True
            except WatchError as exc:
                # redis-py reports a connection lost while watching as a WatchError: that
                # is Redis unreachable, not the key changing, and is raised as such
                if isinstance(exc.__context__, (RedisConnectionError, RedisTimeoutError)):
                    raise exc.__context__ from None
                return False

    def _push_by_script(self, messages: list[tuple[str, bytes]]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for queue, batch in by_queue(messages).items():
            for start in range(0, len(batch), CHUNK):
                args = [self.token, "LPUSH", *batch[start : start + CHUNK]]
                self._pipe_fenced(pipe, [self.lock_key, queue], args)
        for result in pipe.execute():
            self._check(result)

    def _command(self, key: str, command: str, values: list) -> None:
        if not values:
            return
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(values), CHUNK):
            args = [self.token, command, *values[start : start + CHUNK]]
            self._pipe_fenced(pipe, [self.lock_key, key], args)
        for result in pipe.execute():
            self._check(result)
