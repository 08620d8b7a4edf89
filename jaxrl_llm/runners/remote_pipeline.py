"""The asynchronous pipeline across two processes: learner (process 0) and generator (process 1).

Both processes joined one `jax.distributed` run (`jaxrl_llm.distributed.initialize`), each on
its own local devices. They share nothing but two channels:

  control and batches  the coordination service's key-value store (`jax.distributed`'s client):
                       run start, published versions, weight requests, generated batches
                       (pickled host data), errors and the end of the run;
  weights              JAX's transfer server (`jax.experimental.transfer`): the generator pulls
                       a published version straight from the learner's devices into its own
                       decode layout (over the network's transport on GPU / TPU, over TCP on
                       CPU); the learner's copy never passes through its host.

`RemotePipeline` offers each side the methods of `jaxrl_llm.runners.pipeline.Pipeline` that side
uses, so `AsyncSchedule` drives it unchanged. Key layout under the namespace:

  start             JSON {"step", "data"}: where the learner resumes (the generator follows)
  weights/<v>       version v is published (deleted when the learner drops it)
  pull/<n>          the generator's n-th weight request: "<at_least> <exact>"
  served/<n>        the version the learner scheduled for pull n (the transfer uuid is n)
  batch/<s>         the pickled `GeneratedBatch` of step s (deleted once the learner has it)
  last_batch        the newest step sent (the queue depth)
  error/<side>      why a side stopped; closed: the learner ended the run
  flags/<name>      `set_flag` / `wait_flag`
"""

from __future__ import annotations

import json
import pickle
import threading
import time
from typing import Any

import jax
import numpy as np

from jaxrl_llm.runners.pipeline import GeneratedBatch, PipelineClosed, PipelineError

NAMESPACE = "jaxrl_llm/async"
POLL_S = 0.02


def _client():
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError(
            "config.async_rl.processes=2 needs jax.distributed: call "
            "jaxrl_llm.distributed.initialize() first (jaxrl_llm.main does)."
        )
    return client


class RemotePipeline:
    """One side of the two-process pipeline.

    Args:
      side: "learner" (process 0) or "generator" (process 1).
      timeout_s: the longest either side waits for the other.
      weights_like: generator only: a pytree of `jax.ShapeDtypeStruct`s with shardings on the
        generator's devices, the decode layout pulled weights land in.
      host: the address the other process reaches this one's transfer server at (the
        machine's IP when the processes run on different hosts).
      namespace: key prefix in the key-value store.
    """

    def __init__(
        self,
        *,
        side: str,
        timeout_s: float,
        weights_like: Any = None,
        host: str = "127.0.0.1",
        namespace: str = NAMESPACE,
    ):
        if side not in ("learner", "generator"):
            raise ValueError(f"RemotePipeline: side={side!r} must be 'learner' or 'generator'.")
        self.side, self.other = side, "generator" if side == "learner" else "learner"
        self.timeout_s, self.ns = timeout_s, namespace
        self.client = _client()
        self._lock = threading.Lock()
        self._closed = False
        self._published: dict[int, Any] = {}  # learner: version -> decode-layout params
        self._held: tuple[int, Any] | None = None  # generator: the last pulled version
        self._next_batch = 0
        self._requests = 0
        self.pull_seconds = 0.0
        from jax.experimental import transfer

        device = jax.local_devices()[0]
        self._server = transfer.start_transfer_server(device.client, f"{host}:0", [f"{host}:0"])
        self._weights_like = weights_like
        self._connection = None
        self._serving: threading.Thread | None = None
        if side == "learner":
            self._set(f"{self.ns}/transfer_address", self._server.address())
            self._serving = threading.Thread(
                target=self._serve_pulls, name="jaxrl_llm-weight-server", daemon=True
            )
            self._serving.start()

    # -- the key-value store ------------------------------------------------------------------
    def _set(self, key: str, value: str) -> None:
        self.client.key_value_set(key, value, allow_overwrite=True)

    def _try_get(self, key: str, *, raw: bool = False):
        try:
            if raw:
                return self.client.key_value_try_get_bytes(key)
            return self.client.key_value_try_get(key)
        except Exception:  # NOT_FOUND
            return None

    def _raise_if_ended(self) -> None:
        error = self._try_get(f"{self.ns}/error/{self.other}")
        if error is not None:
            raise PipelineError(f"the {self.other} failed ({error}); the {self.side} stops too")
        if self._closed or (self.side == "generator" and self._try_get(f"{self.ns}/closed")):
            raise PipelineClosed()

    def _wait_for(self, ready, what: str):
        """Polls `ready()` until it returns a value (not None); returns (value, seconds)."""
        start = time.monotonic()
        while True:
            value = ready()
            if value is not None:
                return value, time.monotonic() - start
            self._raise_if_ended()
            if time.monotonic() - start > self.timeout_s:
                raise PipelineError(
                    f"the {self.side} waited {self.timeout_s:.0f}s for {what} from the "
                    f"{self.other} process; it is stalled, dead or too slow. Raise "
                    "config.async_rl.timeout_s if it is only slow."
                )
            time.sleep(POLL_S)

    # -- flags: one-off signals between the two processes ------------------------------------
    def set_flag(self, name: str) -> None:
        """Raises flag `name` for the other process."""
        self._set(f"{self.ns}/flags/{name}", "1")

    def wait_flag(self, name: str) -> float:
        """Waits until flag `name` is raised; returns the seconds waited."""
        _, waited = self._wait_for(lambda: self._try_get(f"{self.ns}/flags/{name}"), name)
        return waited

    # -- the start of the run -----------------------------------------------------------------
    def send_start(self, step: int, data: dict[str, Any]) -> None:
        """Learner: tells the generator the step and data position the run resumes at."""
        self._next_batch = step
        self._set(f"{self.ns}/start", json.dumps({"step": step, "data": data}))

    def receive_start(self) -> tuple[int, dict[str, Any]]:
        """Generator: waits for `send_start`; returns (step, data position)."""
        text, _ = self._wait_for(lambda: self._try_get(f"{self.ns}/start"), "the run's start")
        start = json.loads(text)
        return start["step"], start["data"]

    # -- weights: the learner's side ----------------------------------------------------------
    def publish(self, version: int, params: Any) -> None:
        """Learner: makes `params` (decode layout, learner devices) pullable as `version`."""
        with self._lock:
            self._published[version] = params
        self._set(f"{self.ns}/weights/{version}", "1")

    def drop_weights_below(self, version: int) -> None:
        """Learner: forgets versions older than `version` (no later batch may use them)."""
        with self._lock:
            old = [v for v in self._published if v < version]
            for v in old:
                del self._published[v]
        for v in old:
            self.client.key_value_delete(f"{self.ns}/weights/{v}")

    def published(self) -> dict[int, Any]:
        """Learner: a copy of {version: params} it currently publishes."""
        with self._lock:
            return dict(self._published)

    def _serve_pulls(self) -> None:
        """Learner thread: answers pull request n with the version asked for (exact) or the
        newest published (at least the one asked for), scheduled for transfer as uuid n."""
        n = 0
        while not self._closed:
            request = self._try_get(f"{self.ns}/pull/{n}")
            if request is None:
                time.sleep(POLL_S)
                continue
            at_least, exact = (int(x) for x in request.split())
            with self._lock:
                version = at_least if exact else max(self._published, default=-1)
                params = self._published.get(version)
            if params is None or version < at_least:
                self._set(f"{self.ns}/served/{n}", "-1")
            else:
                self._server.await_pull(n, jax.tree.leaves(params))
                self._set(f"{self.ns}/served/{n}", str(version))
            self.client.key_value_delete(f"{self.ns}/pull/{n}")
            n += 1

    # -- weights: the generator's side --------------------------------------------------------
    def _versions(self) -> list[int]:
        entries = self.client.key_value_dir_get(f"{self.ns}/weights/")
        return sorted(int(key.rsplit("/", 1)[1]) for key, _ in entries)

    def _pull(self, at_least: int, exact: bool) -> tuple[int, Any]:
        """Asks the learner for a version and pulls it onto this process's devices."""
        if self._connection is None:
            address, _ = self._wait_for(
                lambda: self._try_get(f"{self.ns}/transfer_address"), "the weight server"
            )
            self._connection = self._server.connect(address)
        n = self._requests
        self._requests += 1
        self._set(f"{self.ns}/pull/{n}", f"{at_least} {int(exact)}")
        served, _ = self._wait_for(
            lambda: self._try_get(f"{self.ns}/served/{n}"), f"weight version {at_least}"
        )
        self.client.key_value_delete(f"{self.ns}/served/{n}")
        version = int(served)
        if version < 0:
            raise PipelineError(
                f"the learner no longer publishes weight version {at_least}; this is a bug of "
                "the runner, not of the config."
            )
        start = time.perf_counter()
        leaves, treedef = jax.tree.flatten(self._weights_like)
        params = jax.tree.unflatten(treedef, self._connection.pull(n, leaves))
        jax.block_until_ready(params)
        self.pull_seconds += time.perf_counter() - start
        self._held = (version, params)
        return version, params

    def weights(self, *, at_least: int, exact: bool = False) -> tuple[int, Any, float]:
        """Generator: the newest published version >= `at_least` (exactly `at_least` when
        `exact`) on this process's devices, and the seconds waited (the pull included)."""
        start = time.monotonic()

        def pick():
            versions = self._versions()
            if exact:
                return at_least if at_least in versions else None
            fresh = [v for v in versions if v >= at_least]
            return max(fresh) if fresh else None

        version, _ = self._wait_for(pick, f"weight version {at_least}")
        if self._held is None or self._held[0] != version:
            version, _ = self._pull(version, exact)
        version, params = self._held
        return version, params, time.monotonic() - start

    def newest(self) -> tuple[int, Any]:
        """Generator: the newest published version (pulled if newer than the one held)."""
        self._raise_if_ended()
        versions = self._versions()
        if self._held is None or (versions and versions[-1] > self._held[0]):
            if not versions:
                raise PipelineError("no weight version is published; the learner publishes first")
            self._pull(versions[-1], exact=False)
        return self._held

    # -- batches ------------------------------------------------------------------------------
    def put(self, batch: GeneratedBatch) -> None:
        """Generator: sends a generated batch (host data) to the learner."""
        self._raise_if_ended()
        self.client.key_value_set_bytes(f"{self.ns}/batch/{batch.step}", pickle.dumps(batch))
        self._set(f"{self.ns}/last_batch", str(batch.step))

    def get(self) -> tuple[GeneratedBatch, float, int]:
        """Learner: the next step's batch, the seconds waited, and the batches waiting."""
        key = f"{self.ns}/batch/{self._next_batch}"
        data, waited = self._wait_for(lambda: self._try_get(key, raw=True), "a batch")
        depth = int(self._try_get(f"{self.ns}/last_batch") or self._next_batch)
        depth = max(depth - self._next_batch + 1, 1)
        self.client.key_value_delete(key)
        self._next_batch += 1
        return pickle.loads(data), waited, depth

    # -- ending -------------------------------------------------------------------------------
    def fail(self, side: str, error: BaseException) -> None:
        """Tells the other process that `side` failed."""
        message = " ".join(f"{type(error).__name__}: {error}".split())
        try:
            self._set(f"{self.ns}/error/{side}", message[:2000])
        except Exception:  # the coordination service is gone: the other side times out
            pass

    def close(self) -> None:
        """Ends this side; the learner's close also tells the generator the run is over."""
        if self._closed:
            return
        self._closed = True
        if self.side == "learner":
            try:
                self._set(f"{self.ns}/closed", "1")
            except Exception:
                pass
            if self._serving is not None:
                self._serving.join(5.0)
        with self._lock:
            self._published.clear()
        self._held = None


def weights_like(params: Any, shardings: Any) -> Any:
    """`jax.ShapeDtypeStruct`s of `params` (an `nnx.State`) laid out by `shardings` (a tree
    with the same leaves in the same order), in the tree structure of `params`."""
    leaves, treedef = jax.tree.flatten(params)
    placed = jax.tree.leaves(shardings)
    if len(placed) != len(leaves):
        raise ValueError(f"weights_like: {len(leaves)} weights but {len(placed)} shardings.")
    return treedef.unflatten(
        jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=s)
        for x, s in zip(leaves, placed, strict=True)
    )
