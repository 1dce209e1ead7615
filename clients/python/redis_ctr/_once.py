"""Writes sent once: redis-py's retries stay on for reads, never for a write.

redis-py's default ``retry`` (three retries on ``ConnectionError`` and ``TimeoutError``) sends
a command again after its reply timed out. A write the server had read still runs (a server
paused or frozen runs what it read when it resumes), so each copy would count: an untokened
add whose reply timed out counted twice. Every module write (:attr:`Call.write`) is sent
here instead, once: a reply that does not come raises redis-py's ``TimeoutError`` and the write
counted once or not at all. Connecting is still retried by redis-py (nothing was sent yet).

- ``redis.Redis`` (sync and asyncio): a connection from the client's pool, the command sent
  and its reply read on it (what redis-py's ``execute_command`` does, without the retry);
  after any failure but the server's error reply the connection is closed (its next reply
  would be this one's).
- ``RedisCluster`` (sync and asyncio): sent to the master of the key's slot
  (``target_nodes``), for which redis-py makes no retries; it still follows ``MOVED`` and
  ``ASK`` (the command did not run where it was redirected from).
- Pipelines: see :func:`execute_pipeline_once`.
"""

from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Iterator, List, Tuple

from redis.exceptions import ClusterError, ResponseError

from ._calls import Call, T


def pinned_options(client: Any, call: Call[T]) -> dict[str, Any]:
    """The options of ``call`` with ``target_nodes``, the master of its key's slot, on a
    cluster client (its retries are off for a call that names its node); ``call.options`` for
    any other client or when the slot map cannot say (then redis-py sends it as usual)."""
    if "target_nodes" in call.options:
        return call.options
    node_from_key = getattr(client, "get_node_from_key", None)
    if node_from_key is None:
        return call.options
    try:
        node = node_from_key(call.args[1])
    except Exception:  # a slot map being refreshed, a slot with no owner
        return call.options
    if node is None:
        return call.options
    return {**call.options, "target_nodes": node}


def is_cluster(client: Any) -> bool:
    return getattr(client, "get_node_from_key", None) is not None


def _checkout(pool: Any, name: str) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants the command's name
        return pool.get_connection(name)


@contextmanager
def _dropped_on_failure(conn: Any) -> Iterator[None]:
    """Closes ``conn`` when the block fails other than by the server's error reply: a reply may
    still come on it, and must never be read as another command's."""
    try:
        yield
    except ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise


@asynccontextmanager
async def _dropped_on_failure_async(conn: Any) -> AsyncIterator[None]:
    """The asyncio twin of :func:`_dropped_on_failure`."""
    try:
        yield
    except ResponseError:
        raise
    except BaseException:
        await conn.disconnect()
        raise


def send_once(client: Any, call: Call[T]) -> Any:
    """The raw reply of ``call`` sent once through a sync client (see the module)."""
    if is_cluster(client):
        return client.execute_command(*call.args, **pinned_options(client, call))
    pool = client.connection_pool
    name = call.args[0]
    shared = client.connection
    conn = shared or _checkout(pool, name)
    lock = getattr(client, "single_connection_lock", None) if shared else None
    if lock is not None:
        lock.acquire()
    try:
        with _dropped_on_failure(conn):
            conn.send_command(*call.args)
            return client.parse_response(conn, name, **call.options)
    finally:
        if lock is not None:
            lock.release()
        if not shared:
            pool.release(conn)


async def send_once_async(client: Any, call: Call[T]) -> Any:
    """The raw reply of ``call`` sent once through an asyncio client (see the module)."""
    initialize = getattr(client, "initialize", None)
    if initialize is not None:
        await initialize()  # an asyncio RedisCluster reads its slot map here, once
    if is_cluster(client):
        return await client.execute_command(*call.args, **pinned_options(client, call))
    pool = client.connection_pool
    name = call.args[0]
    shared = client.connection
    conn = shared or await _checkout(pool, name)
    lock = getattr(client, "_single_conn_lock", None) if shared else None
    if lock is not None:
        await lock.acquire()
    try:
        async with _dropped_on_failure_async(conn):
            await conn.send_command(*call.args)
            return await client.parse_response(conn, name, **call.options)
    finally:
        if lock is not None:
            lock.release()
        if not shared:
            await pool.release(conn)


def pipeline_once(pipe: Any) -> Any:
    """For a sync non-cluster pipeline: its commands sent once, as redis-py's
    ``Pipeline.execute`` does without its retry (a transaction or a batch whose replies timed
    out may have run; redis-py would send it all again). None for another pipeline."""
    execute_transaction = getattr(pipe, "_execute_transaction", None)
    execute_pipeline = getattr(pipe, "_execute_pipeline", None)
    if is_cluster(pipe) or execute_transaction is None or execute_pipeline is None:
        return None
    return execute_transaction if pipe.transaction or pipe.explicit_transaction else execute_pipeline


def cluster_transaction(strategy: Any) -> bool:
    """True for the execution strategy of a cluster ``MULTI``/``EXEC`` pipeline (redis-py 6
    and later), which redis-py runs again, whole, after a timeout: it is run once instead
    (its private ``_execute_transaction``, the one step of its retry loop)."""
    return type(strategy).__name__ == "TransactionStrategy" and hasattr(
        strategy, "_execute_transaction"
    )


def _drop_transaction_connection(strategy: Any) -> None:
    """Closes a cluster transaction's connection after a failure: its late reply must never be
    read as another command's (redis-py closes it only after connection errors)."""
    connection = getattr(strategy, "_transaction_connection", None)
    if connection is not None:
        connection.disconnect()


def execute_pipeline_once(pipe: Any, raise_on_error: bool) -> List[Any]:
    """The replies of a sync pipeline's queued commands, sent once (see the module).

    A non-cluster pipeline runs on one connection, without redis-py's retry. A cluster
    pipeline (not a transaction) sends each master its commands once and does not follow
    redirections (a command redirected did not run: its ``MOVED``/``ASK`` stands in the
    results, for the caller to retry). A cluster transaction runs once on its master."""
    execute = pipeline_once(pipe)
    if execute is None:
        # The queue is the execution strategy's since redis-py 6 (command_stack before, and no
        # cluster transactions).
        strategy: Any = getattr(pipe, "_execution_strategy", None)
        if cluster_transaction(strategy):
            try:
                return list(strategy._execute_transaction(strategy.command_queue, raise_on_error))
            except ResponseError:
                raise
            except BaseException:
                _drop_transaction_connection(strategy)
                raise
            finally:
                pipe.reset()
        if is_cluster(pipe):
            stack = pipe.command_stack if strategy is None else strategy.command_queue
            try:
                return list(
                    pipe.send_cluster_commands(
                        stack, raise_on_error=raise_on_error, allow_redirections=False
                    )
                )
            finally:
                pipe.reset()
        return list(pipe.execute(raise_on_error=raise_on_error))
    stack = pipe.command_stack
    if not stack and not pipe.watching:
        return []
    if pipe.scripts:
        pipe.load_scripts()
    conn = pipe.connection
    if not conn:
        conn = _checkout(pipe.connection_pool, "MULTI")
        pipe.connection = conn  # so reset() gives it back to the pool
    try:
        with _dropped_on_failure(conn):
            return list(execute(conn, stack, raise_on_error))
    finally:
        pipe.reset()


async def execute_async_pipeline_once(pipe: Any, raise_on_error: bool) -> List[Any]:
    """The asyncio twin of :func:`execute_pipeline_once` (a cluster pipeline runs as redis-py
    runs it)."""
    strategy: Any = getattr(pipe, "_execution_strategy", None)
    if cluster_transaction(strategy):
        try:
            return list(await strategy._execute_transaction(strategy._command_queue, raise_on_error))
        except ResponseError:
            raise
        except BaseException:
            connection = getattr(strategy, "_transaction_connection", None)
            if connection is not None:
                await connection.disconnect()
            raise
        finally:
            await pipe.reset()
    execute_transaction = getattr(pipe, "_execute_transaction", None)
    execute_pipeline = getattr(pipe, "_execute_pipeline", None)
    if is_cluster(pipe) or execute_transaction is None or execute_pipeline is None:
        # A cluster pipeline: redis-py sends each master its commands once when errors are
        # returned, not raised (it resends only those redirected: MOVED, ASK, TRYAGAIN).
        return list(await pipe.execute(raise_on_error=raise_on_error))
    execute = execute_transaction if pipe.is_transaction or pipe.explicit_transaction else execute_pipeline
    stack = pipe.command_stack
    if not stack and not pipe.watching:
        return []
    if pipe.scripts:
        await pipe.load_scripts()
    conn = pipe.connection
    if not conn:
        conn = await _checkout(pipe.connection_pool, "MULTI")
        pipe.connection = conn
    try:
        async with _dropped_on_failure_async(conn):
            return list(await execute(conn, stack, raise_on_error))
    finally:
        await pipe.reset()


def _with_wait(client: Any, call: Call[T], replicas: int, timeout_ms: int) -> Any:
    """A pipeline (not a transaction) of ``call`` then ``WAIT replicas timeout_ms``, both to the
    same server on one connection (a cluster client's: the master of the key's slot), so that
    ``WAIT`` counts the replicas that hold this write."""
    options = pinned_options(client, call)
    wait_options = {}
    if is_cluster(client):
        if "target_nodes" not in options:
            raise ClusterError(f"no master known for the slot of {call.args[1]!r}: retry")
        wait_options = {"target_nodes": options["target_nodes"]}
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*call.args, **options)
    pipe.execute_command("WAIT", replicas, timeout_ms, **wait_options)
    return pipe


def _waited(replies: List[Any]) -> Tuple[Any, int]:
    """The write's raw reply and the replicas ``WAIT`` counted; the first error raised."""
    for reply in replies:
        if isinstance(reply, BaseException):
            raise reply
    raw, acknowledged = replies
    return raw, int(acknowledged)


def send_and_wait(client: Any, call: Call[T], replicas: int, timeout_ms: int) -> Tuple[Any, int]:
    """``call`` sent once, then ``WAIT replicas timeout_ms`` on the same connection: its raw
    reply and how many replicas of that server acknowledged it (see :func:`_with_wait`)."""
    pipe = _with_wait(client, call, replicas, timeout_ms)
    return _waited(execute_pipeline_once(pipe, raise_on_error=False))


async def send_and_wait_async(
    client: Any, call: Call[T], replicas: int, timeout_ms: int
) -> Tuple[Any, int]:
    """The asyncio twin of :func:`send_and_wait`."""
    initialize = getattr(client, "initialize", None)
    if initialize is not None:
        await initialize()
    pipe = _with_wait(client, call, replicas, timeout_ms)
    return _waited(await execute_async_pipeline_once(pipe, raise_on_error=False))
