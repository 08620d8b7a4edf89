"""The episode player: multi-turn episodes (`config.env`) in place of single completions.

The collector of runs with `config.env.name` set (`jaxrl_llm.runners.collectors`): each round
plays G episodes per prompt (`jaxrl_llm.envs.run_episodes`: tool calls, later user turns) with
the rollout's weights and rewards them with their environments; the algorithm trains on them in
the `Rollout` layout (loss on model tokens only), with each turn's reward as experience too.
Held-out evaluation plays greedy episodes on the task's test examples. With
`config.env.warmup_steps`, the policy is first fine-tuned on scripted demonstrations of the task
(SFT), for models that never write a well-formed tool call on their own. Any schedule drives it
(synchronous, or asynchronous with bounded staleness). It serves the algorithm's requests that
have a registered server (`jaxrl_llm.algorithms.collected`), not the built-in greedy baseline or
gold references.

    config = load_config("experiments/configs/tool_calculator_smollm2.py")
    train(config, "runs/tool")          # jaxrl_llm.runners.online picks EpisodePlayer
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from jaxrl_llm.algorithms.base import Algorithm
from jaxrl_llm.algorithms.collected import CollectContext, serve_collected
from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.envs.config import episode_limits
from jaxrl_llm.envs.episodes import EpisodeBatch, run_episodes
from jaxrl_llm.envs.evaluation import held_out_metrics
from jaxrl_llm.envs.tasks import Demonstration, episode_metrics, episode_task
from jaxrl_llm.evals import EvalSet
from jaxrl_llm.rewards.runner import RewardOutput
from jaxrl_llm.roles import Learner
from jaxrl_llm.rollout import DecodeWork
from jaxrl_llm.runners.collectors import Collector, Generated, round_seed
from jaxrl_llm.runners.components import Roles, RunParts
from jaxrl_llm.runners.hooks import RunContext
from jaxrl_llm.training import make_optimizer
from jaxrl_llm.training.sft import SftBatch, sft_loss

__all__ = ["EpisodePlayer", "demonstration_rows"]


def demonstration_rows(renderer: EpisodeRenderer, demos: list[Demonstration], *, width: int):
    """SFT rows of scripted episodes, token in / token out like sampled ones: the prompt, each
    model turn (its text encoded, then the end-of-turn token; loss here), each observation
    rendered by the template (no loss).

    Returns:
      (tokens int32 [N, width], loss_mask bool [N, width]); a demonstration longer than
      `width` raises ValueError.
    """
    tokenizer = renderer.tokenizer
    tokens = np.full((len(demos), width), tokenizer.pad_token_id or 0, np.int32)
    mask = np.zeros((len(demos), width), bool)
    for i, demo in enumerate(demos):
        ids = renderer.prompt_ids(demo.messages, tools=demo.tools)
        row_mask = [False] * len(ids)
        for k, turn in enumerate(demo.turns):
            turn_ids = tokenizer.encode(turn) + [renderer.end_of_turn_id]
            ids += turn_ids
            row_mask += [True] * len(turn_ids)
            if k < len(demo.observations):
                obs = renderer.observation_ids(demo.observations[k], last_token=turn_ids[-1])
                ids += obs
                row_mask += [False] * len(obs)
        if len(ids) > width:
            raise ValueError(
                f"demonstration {i} has {len(ids)} tokens > config.env.max_episode_tokens={width}."
            )
        tokens[i, : len(ids)], mask[i, : len(ids)] = ids, row_mask
    return tokens, mask


class EpisodePlayer(Collector):
    """Multi-turn episodes of the run's environment (see the module docstring).

    Args:
      config: the run config (`config.env` names the task).
      algorithm: the run's `Algorithm`; its registered requests are served each round.
      parts: the run's model, tokenizer, prompt batcher and rewards.
      roles: the run's roles (the rollout plays, the actor warms up).
    """

    description = "the episode player (multi-turn episodes)"
    unserved_fix = "use grpo, ppo, reinforce_pp or online_dpo with config.env"

    def __init__(self, config, algorithm: Algorithm, parts: RunParts, roles: Roles):
        self.check(algorithm)
        self.config, self.algorithm, self.parts, self.roles = config, algorithm, parts, roles
        self.task = episode_task(config)
        if self.task.sandbox is not None:
            sandbox = self.task.sandbox
            # the mechanism and the seccomp filter in force (`Isolation.describe`)
            print(f"[jaxrl_llm] python tool sandbox: {sandbox.describe()}", flush=True)
        self.limits = episode_limits(config)
        self.renderer = EpisodeRenderer(parts.tokenizer)
        examples = self.task.examples("test", config.task.eval_seed, config.task.eval_size)
        self.eval_sets = [EvalSet(config.env.name, examples)]
        self.eval_correct: dict[str, Any] = {}  # greedy episodes keep no per-question record
        self.greedy = roles.rollout.episode_decoder(
            num_slots=min(config.eval.batch_size, len(examples)),
            max_length=self.limits.max_episode_tokens,
            temperature=0.0,
        )
        episodes = config.rollout.num_prompts * config.rollout.group_size
        self.sampler = roles.rollout.episode_decoder(
            num_slots=config.env.num_slots or episodes,
            max_length=self.limits.max_episode_tokens,
            temperature=config.rollout.temperature,
        )

    def play(self, decoder, examples, *, seed: int, params) -> EpisodeBatch:
        """One episode per example, with fresh environments."""
        return run_episodes(
            decoder,
            self.renderer,
            [self.task.make_env() for _ in examples],
            examples,
            limits=self.limits,
            seed=seed,
            params=params,
            refill_at=self.config.env.refill_at or None,
        )

    def evaluate(self) -> dict[str, float]:
        """Greedy episodes on the held-out examples: accuracy, tool-call rates, per-turn scores."""
        t0 = time.time()
        rollout = self.roles.rollout
        rollout.sync(self.roles.actor.params)
        batch = self.play(self.greedy, self.eval_sets[0].examples, seed=0, params=rollout.params)
        rollout.release()
        keep = held_out_metrics(batch)
        keep["seconds"] = time.time() - t0
        return keep

    # -- SFT warm-up --------------------------------------------------------------------------
    def start(self, run: RunContext) -> None:
        """Warms the policy up on demonstrations before the first step (`config.env.warmup_*`)."""
        env = self.config.env
        if not env.warmup_steps or run.meta["step"] > 0:
            return
        if self.task.demonstrations is None:
            raise ValueError(
                f"config.env.warmup_steps={env.warmup_steps}: task {env.name!r} has no "
                "demonstrations; set warmup_steps=0."
            )
        t0 = time.time()
        seed = self.config.seed + 1  # other examples than the first training batches
        demos = self.task.demonstrations(self.task.examples("train", seed, env.warmup_demos))
        tokens, mask = demonstration_rows(
            self.renderer, demos, width=self.limits.max_episode_tokens
        )
        optimizer = make_optimizer(
            learning_rate=env.warmup_learning_rate, total_steps=env.warmup_steps,
            max_grad_norm=self.config.optimizer.max_grad_norm,
        )  # fmt: skip
        loss = functools.partial(sft_loss, remat=self.config.train.remat)
        learner = Learner(self.parts.model, optimizer, loss, self.roles.actor.mesh)
        rng = np.random.default_rng(seed)
        losses = []
        for _ in range(env.warmup_steps):
            rows = rng.choice(
                len(demos), size=min(env.warmup_batch_size, len(demos)), replace=False
            )
            metrics = learner.update(SftBatch(tokens[rows], mask[rows]))
            losses.append(float(metrics["loss"]) if "loss" in metrics else float("nan"))
        self.roles.actor.reset(learner.params)
        del learner
        after = self.evaluate()
        run.summary["warmup"] = {
            "demonstrations": len(demos),
            "steps": env.warmup_steps,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "eval_after_warmup": after,
            "seconds": time.time() - t0,
        }
        print(
            f"[jaxrl_llm] SFT warm-up: {env.warmup_steps} steps on {len(demos)} demonstrations, "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; held-out accuracy "
            f"{100 * after['accuracy']:.1f}%, episodes with a tool call "
            f"{100 * after.get('tool/episodes_with_call', 0.0):.1f}%"
        )

    # -- one step -----------------------------------------------------------------------------
    def generate(self, step: int, params, *, weights=None, round_index: int = 0) -> Generated:
        """The next prompts' episodes (G per prompt), played with `params` and rewarded by their
        environments."""
        if weights is not None:
            raise ValueError("multi-turn episodes do not take in-flight weight updates.")
        c = self.config
        group = c.rollout.group_size
        t0 = time.time()
        examples = next(self.parts.batcher)
        group_examples = [e for e in examples for _ in range(group)]
        batch = self.play(
            self.sampler, group_examples, seed=round_seed(c, step, round_index), params=params
        )
        success = np.array([info.get("correct", 0.0) for info in batch.infos], np.float32)
        reward_out = RewardOutput(
            total=batch.returns,
            per_function={"task": success},
            num_errors={"env": int(batch.metrics["episode/end/env_error"])},
            num_timeouts={"tool": int(batch.metrics.get("episode/tool/timeout", 0.0))},
        )
        m = batch.metrics
        work = DecodeWork(
            prefill_tokens=m["work/prefill_tokens"],
            prefill_tokens_plain=m["work/prefill_positions"],
            decode_row_steps=m["work/decode_active_steps"],
            decode_row_steps_plain=m["work/decode_row_steps"],
            decode_steps=m["work/decode_steps"],
        )
        completions = [_transcript_text(t) for t in batch.transcripts]
        context = CollectContext(
            config=c,
            examples=examples,
            group_size=group,
            rollout=batch.rollout,
            completions=completions,
            rewards=batch.returns,
            tokenizer=self.parts.tokenizer,
            episodes=batch,
        )
        collected = serve_collected(self.algorithm.collects, context)
        seconds = {"rollout": time.time() - t0, "reward": 0.0}
        return Generated(
            examples, batch.rollout, completions, reward_out, None, work, seconds,
            episodes=batch, collected=collected,
        )  # fmt: skip

    def experience_fields(self, generated: Generated) -> dict[str, Any]:
        """Each turn's reward and the turn of each model token (turn-level credit)."""
        episodes = generated.episodes
        return {"turn_rewards": episodes.turn_rewards, "turn_index": episodes.turn_index}

    def generated_scalars(self, generated: Generated) -> dict[str, float]:
        """The episodes' metrics (turns, end reasons, tool calls, per-turn scores, work)."""
        metrics = episode_metrics(generated.episodes)
        metrics.pop("accuracy", None)  # the step's reward/accuracy says it
        if self.task.sandbox is not None:  # env/sandbox_level and env/sandbox_seccomp
            metrics.update(self.task.sandbox.metrics())
        return metrics


def _transcript_text(transcript: list[tuple[str, str]]) -> str:
    """An episode as text for samples.jsonl: each model turn and observation, labelled."""
    return "\n".join(f"[{role}] {text}" for role, text in transcript[1:])
