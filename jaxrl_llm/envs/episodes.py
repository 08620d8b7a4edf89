"""The episode runner: environments and the episode decoder, token in and token out.

`run_episodes` plays one batch of episodes (one per environment) on an `EpisodeDecoder`:

  1. admit: each free slot takes the next episode; its opening messages are rendered once
     (`EpisodeRenderer.prompt_ids`) and appended, and its first turn starts.
  2. decode until a few running turns have ended (`refill_at`); the others keep their state.
  3. each ended turn's ids are read as sampled; the environment's `step` gets the turn's text
     and runs in a thread pool, so a slow tool holds its own episode only: the other slots
     decode on while it runs (a step still running is checked again after the next decode).
  4. an observation is rendered through the template and appended to the slot's row: only
     its tokens go through the model (the KV cache holds the conversation so far).
  5. an episode ends when its environment says done, or at a limit (`EpisodeLimits`): its slot
     goes to the next episode (continuous batching).

The result, `EpisodeBatch`, is laid out like a single-turn `Rollout` ([B, T] tokens, prompt
at 0, `completion_mask` True exactly at model tokens, rollout log-probs there), so GRPO, RLOO,
PPO and the other online algorithms train on episodes unchanged; it adds the segments (prompt,
model, observation), each model token's turn, and the rewards of each turn.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxrl_llm.envs.base import Environment, EpisodeLimits, StepResult
from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.rollout.episodes import Addition, EpisodeDecoder
from jaxrl_llm.rollout.types import FinishReason, Rollout

__all__ = ["END_REASONS", "SEGMENT_NAMES", "EpisodeBatch", "run_episodes"]

# Why an episode ended (`EpisodeBatch.end_reasons`); each is counted as "episode/end/<name>".
END_REASONS = ("done", "max_turns", "max_episode_tokens", "env_error")
# Values of `EpisodeBatch.segments`.
SEGMENT_NAMES = ("pad", "prompt", "model", "observation")
PAD, PROMPT, MODEL, OBSERVATION = range(4)


class EpisodeBatch(NamedTuple):
    """One batch of finished episodes, on the host.

    Attributes:
      rollout: a `Rollout` of numpy arrays [B, T]: tokens (prompt, turns and observations,
        then pad), completion_mask True exactly at model tokens, logprobs / raw_logprobs at
        them, prompt_lengths, lengths (tokens after the prompt, observations included) and
        finish_reason (of the last turn).
      segments: int8 [B, T], `SEGMENT_NAMES` index of every column.
      turn_index: int32 [B, T], the turn (0, 1, ...) of each model token, -1 elsewhere.
      turn_rewards: float32 [B, K] (K = max_turns), each turn's reward, NaN after the last.
      num_turns: int32 [B].
      end_reasons: [B] names from `END_REASONS`.
      infos: [B] the environment's `info` of each episode's last turn.
      transcripts: [B] the episode as (role, text) pairs: "prompt", "model", "observation".
      metrics: floats for logging: episode counts by end reason, environment counts, work.
    """

    rollout: Rollout
    segments: np.ndarray
    turn_index: np.ndarray
    turn_rewards: np.ndarray
    num_turns: np.ndarray
    end_reasons: list[str]
    infos: list[dict[str, float]]
    transcripts: list[list[tuple[str, str]]]
    metrics: dict[str, float]

    @property
    def returns(self) -> np.ndarray:
        """float32 [B], the sum of each episode's turn rewards."""
        return np.nansum(self.turn_rewards, axis=1).astype(np.float32)


@dataclasses.dataclass
class _Episode:
    """Host bookkeeping of one episode."""

    env: Environment
    prompt_length: int = 0
    turn_start: int = 0
    spans: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)  # kind, lo, hi
    rewards: list[float] = dataclasses.field(default_factory=list)
    transcript: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    info: dict[str, float] = dataclasses.field(default_factory=dict)
    end_reason: str | None = None


def _step(env: Environment, reply: str) -> StepResult:
    result = env.step(reply)
    if not isinstance(result, StepResult):
        raise TypeError(
            f"{type(env).__name__}.step returned {type(result).__name__}, not a StepResult."
        )
    return result


def run_episodes(
    decoder: EpisodeDecoder,
    renderer: EpisodeRenderer,
    envs: Sequence[Environment],
    examples: Sequence[Any],
    *,
    limits: EpisodeLimits,
    seed: int | Sequence[int] = 0,
    params=None,
    refill_at: int | None = None,
    max_workers: int = 8,
    step_grace_s: float = 0.05,
) -> EpisodeBatch:
    """Plays one episode per environment to its end; see the module docstring.

    Args:
      decoder: an `EpisodeDecoder` whose `max_length` is `limits.max_episode_tokens`.
      renderer: the tokenizer's `EpisodeRenderer`.
      envs: B environments, one per episode (fresh instances).
      examples: B data examples, passed to each environment's `reset`.
      limits: `EpisodeLimits`.
      seed: sampling seed (one int, or one per episode); see `EpisodeDecoder.init`.
      params: the decode weights (`nnx.State`); None uses the decoder model's own.
      refill_at: the host acts once this many running turns have ended (default: a quarter of
        the slots, at least 1).
      max_workers: threads running environment steps (tool calls) at once.
      step_grace_s: how long the host waits for the steps of the turns that just ended before
        it decodes on without the ones still running.

    Returns:
      `EpisodeBatch`.
    """
    if decoder.max_length != limits.max_episode_tokens:
        raise ValueError(
            f"run_episodes: the decoder's max_length={decoder.max_length} must equal "
            f"limits.max_episode_tokens={limits.max_episode_tokens}."
        )
    if len(envs) != len(examples):
        raise ValueError(f"run_episodes: {len(envs)} environments for {len(examples)} examples.")
    start_time = time.time()
    num = len(envs)
    width, slots_n = limits.max_episode_tokens, decoder.num_slots
    refill_at = refill_at or max(1, slots_n // 4)
    episodes = [_Episode(env) for env in envs]
    counts: collections.Counter = collections.Counter()
    pool = decoder.init(num, seed=seed)
    queue = collections.deque(range(num))
    slot_row = np.full((slots_n,), num, np.int32)  # num: empty
    ready: dict[int, Addition] = {}  # slot -> next append
    pending: dict[int, concurrent.futures.Future] = {}  # slot -> running env step
    view = None
    rounds = 0

    def end(slot: int, reason: str) -> None:
        episodes[slot_row[slot]].end_reason = reason
        counts[f"episode/end/{reason}"] += 1
        slot_row[slot] = num

    def budget(length: int) -> int:
        return max(1, min(limits.max_turn_tokens, width - length - 1))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max_workers) as executor:
        while True:
            # 1. admission of new episodes into free slots
            for slot in np.nonzero(slot_row == num)[0]:
                if not queue or slot in ready:
                    continue
                row = queue.popleft()
                ep = episodes[row]
                try:
                    messages = ep.env.reset(examples[row])
                    ids = renderer.prompt_ids(messages, tools=ep.env.tools())
                except Exception as e:  # noqa: BLE001 - a broken environment ends its episode
                    ep.end_reason, ep.info = "env_error", {"error": repr(e)}
                    counts["episode/end/env_error"] += 1
                    continue
                ep.transcript.append(("prompt", messages[-1]["content"] if messages else ""))
                if len(ids) >= width:  # no room for one model token
                    ep.end_reason = "max_episode_tokens"
                    counts["episode/end/max_episode_tokens"] += 1
                    continue
                ep.prompt_length = ep.turn_start = len(ids)
                ep.spans.append((PROMPT, 0, len(ids)))
                slot_row[slot] = row
                ready[int(slot)] = Addition(row, ids, budget(len(ids)))
            if ready:
                pool = decoder.append(pool, ready, params=params, slot_rows=slot_row)
                for addition in ready.values():
                    episodes[addition.row].turn_start = episodes[addition.row].spans[-1][2]
                ready = {}
            occupied = slot_row < num
            if not occupied.any() and not queue:
                break
            # 2. decode until some running turns end
            running = [s for s in np.nonzero(occupied)[0] if s not in pending]
            view = decoder.view(pool) if view is None or running else view
            live = [s for s in running if view.decoding[slot_row[s]]]
            if live:
                pool = decoder.decode(pool, target=min(refill_at, len(live)), params=params)
                view = decoder.view(pool)
                rounds += 1
            # 3. hand each ended turn to its environment
            for slot in running:
                row = slot_row[slot]
                if view.decoding[row]:
                    continue
                ep = episodes[row]
                length = int(view.length[row])
                turn_ids = view.tokens[row, ep.turn_start : length]
                ep.spans.append((MODEL, ep.turn_start, length))
                reply = renderer.reply_text(turn_ids)
                ep.transcript.append(("model", reply))
                if int(view.finish[row]) == int(FinishReason.LENGTH):
                    counts["turn/length_cut"] += 1
                pending[int(slot)] = executor.submit(_step, ep.env, reply)
            # 4. observations of the steps that have finished
            if pending:
                # Steps that finish within `step_grace_s` (a calculator: microseconds, plus
                # thread hand-over) join this round; slower ones (a sandbox run) do not hold
                # it. When nothing decodes, wait for the first step rather than spin.
                concurrent.futures.wait(pending.values(), timeout=step_grace_s)
                if not any(view.decoding[slot_row[s]] for s in running if s not in pending):
                    concurrent.futures.wait(
                        pending.values(), return_when=concurrent.futures.FIRST_COMPLETED
                    )
            for slot in [s for s, f in pending.items() if f.done()]:
                future = pending.pop(slot)
                row = slot_row[slot]
                ep = episodes[row]
                length = int(view.length[row])
                try:
                    result = future.result()
                except Exception as e:  # noqa: BLE001 - a raising environment ends its episode
                    ep.rewards.append(0.0)
                    ep.info = {**ep.info, "error": repr(e)}
                    end(slot, "env_error")
                    continue
                ep.rewards.append(float(result.reward))
                ep.info = dict(result.info)
                counts.update(result.counts)
                if result.done:
                    end(slot, "done")
                    continue
                if len(ep.rewards) >= limits.max_turns:
                    end(slot, "max_turns")
                    continue
                ids = renderer.observation_ids(
                    result.observation, last_token=view.tokens[row, length - 1]
                )
                if length + len(ids) >= width:
                    end(slot, "max_episode_tokens")
                    continue
                ep.transcript.append(
                    ("observation", "\n".join(m["content"] for m in result.observation))
                )
                ep.spans.append((OBSERVATION, length, length + len(ids)))
                ready[slot] = Addition(int(row), ids, budget(length + len(ids)))
    results = decoder.results(pool)
    return _assemble(episodes, results, limits, counts, rounds, time.time() - start_time)


def _assemble(episodes, results, limits, counts, rounds, seconds) -> EpisodeBatch:
    """The `EpisodeBatch` of finished episodes from the decoder's rows and the host records."""
    num, width = results["tokens"].shape
    segments = np.zeros((num, width), np.int8)
    turn_index = np.full((num, width), -1, np.int32)
    turn_rewards = np.full((num, limits.max_turns), np.nan, np.float32)
    for row, ep in enumerate(episodes):
        turn = 0
        for kind, lo, hi in ep.spans:
            segments[row, lo:hi] = kind
            if kind == MODEL:
                turn_index[row, lo:hi] = turn
                turn += 1
        rewards = ep.rewards[: limits.max_turns]
        turn_rewards[row, : len(rewards)] = rewards
    model_mask = results["model_mask"] & (segments == MODEL)
    prompt_lengths = np.array([ep.prompt_length for ep in episodes], np.int32)
    length = results["length"].astype(np.int32)
    rollout = Rollout(
        tokens=results["tokens"],
        completion_mask=model_mask,
        logprobs=np.where(model_mask, results["logprobs"], 0.0).astype(np.float32),
        raw_logprobs=np.where(model_mask, results["raw_logprobs"], 0.0).astype(np.float32),
        prompt_lengths=prompt_lengths,
        lengths=np.maximum(length - prompt_lengths, 0),
        finish_reason=results["finish"].astype(np.int32),
    )
    num_turns = np.array([sum(k == MODEL for k, _, _ in ep.spans) for ep in episodes], np.int32)
    metrics = {f"episode/end/{reason}": 0.0 for reason in END_REASONS}
    metrics.update(
        {
            k if k.startswith(("episode/", "turn/")) else f"episode/{k}": float(v)
            for k, v in counts.items()
        }
    )
    metrics.update(
        {
            "episode/turns": float(num_turns.mean()) if num else 0.0,
            "episode/model_tokens": float(model_mask.sum(axis=1).mean()) if num else 0.0,
            "episode/observation_tokens": float((segments == OBSERVATION).sum(axis=1).mean())
            if num
            else 0.0,
            "episode/host_rounds": float(rounds),
            "time/episodes_s": seconds,
            "work/prefill_tokens": float(results["prefill_tokens"]),
            "work/prefill_positions": float(results["prefill_positions"]),
            "work/decode_row_steps": float(results["decode_row_steps"]),
            "work/decode_active_steps": float(results["decode_active_steps"]),
            "work/decode_steps": float(results["decode_steps"]),
        }
    )
    return EpisodeBatch(
        rollout=rollout,
        segments=segments,
        turn_index=turn_index,
        turn_rewards=turn_rewards,
        num_turns=num_turns,
        end_reasons=[ep.end_reason or "env_error" for ep in episodes],
        infos=[ep.info for ep in episodes],
        transcripts=[ep.transcript for ep in episodes],
        metrics=metrics,
    )
