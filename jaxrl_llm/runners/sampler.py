"""The single-turn sampler: G sampled completions per prompt, scored by the reward role.

The collector of every run without `config.env` (`jaxrl_llm.runners.collectors`). Each round it
draws the next prompts, samples G completions of each with the rollout's weights (taking newer
weights between decode chunks when the schedule offers them), scores them, and serves the
algorithm's collection requests (`Algorithm.collects`): a greedy completion of every prompt,
scored (`GreedyBaseline`, ReMax), or each prompt's gold answer rendered as one more completion
(`GoldReferences`, RRHF). Held-out evaluation decodes the task's (and `config.eval.tasks`')
held-out prompts (`jaxrl_llm.evals`).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxrl_llm.algorithms.base import Algorithm, GoldReferences, GreedyBaseline, References
from jaxrl_llm.evals import Evaluator
from jaxrl_llm.rollout.chat import completion_texts, prompt_ids, response_rows
from jaxrl_llm.rollout.inflight import WeightsSource
from jaxrl_llm.runners.collectors import Collector, Generated, round_seed
from jaxrl_llm.runners.components import Roles, RunParts, build_eval_sets, build_scorer
from jaxrl_llm.runners.evaluation import eval_settings

__all__ = ["Prompts", "SingleTurnSampler"]


class Prompts(NamedTuple):
    """One round's prompts, as the requests of an algorithm need them.

    Attributes:
      examples: the `Example`s.
      texts: their chat-formatted texts.
      ids: their token ids.
      width: the rollout's row width T (prompt bucket + max_new_tokens).
    """

    examples: list
    texts: list[str]
    ids: list[list[int]]
    width: int


class SingleTurnSampler(Collector):
    """Sampled single completions of prompts (see the module docstring).

    Args:
      config: the run config.
      algorithm: the run's `Algorithm`; its `collects` requests are served each round.
      parts: the run's model, tokenizer, prompt batcher and rewards.
      roles: the run's roles (the rollout samples, the reward scores).
    """

    def __init__(self, config, algorithm: Algorithm, parts: RunParts, roles: Roles):
        self.config, self.algorithm, self.parts, self.roles = config, algorithm, parts, roles
        self.servers = {GreedyBaseline: self.greedy_baseline, GoldReferences: self.gold_references}
        unserved = [r for r in algorithm.collects if type(r) not in self.servers]
        if unserved:
            raise ValueError(
                f"algorithm {algorithm.name!r} asks for {unserved}, which the single-turn "
                f"sampler does not collect (it serves {[t.__name__ for t in self.servers]})."
            )
        self.eval_sets = build_eval_sets(config)
        self.eval_correct: dict[str, Any] = {}  # per-question correctness of the last evaluation
        self.eval_details: dict[str, Any] = {}  # and its answers (`Evaluator.details`)
        self.evaluator = Evaluator(  # decodes with the rollout's weights, so its graph
            roles.rollout.decode_model,
            parts.tokenizer,
            build_scorer(config),
            eval_settings(config),
            timeout_s=config.rewards.timeout_s,
        )

    def evaluate(self) -> dict[str, float]:
        """Held-out metrics of the current actor (`jaxrl_llm.evals`), decoded by the rollout
        role: the training task's unprefixed (accuracy, score, ...), each `config.eval.tasks`
        entry's as "<task>/<metric>", and the seconds it took."""
        t0 = time.time()
        rollout = self.roles.rollout
        rollout.sync(self.roles.actor.params)
        results = self.evaluator(self.eval_sets, params=rollout.params)
        self.eval_correct = dict(self.evaluator.correct)
        self.eval_details = dict(self.evaluator.details)
        rollout.release()
        result = dict(results.pop(self.config.task.name))
        for name, metrics in results.items():
            result.update({f"{name}/{k}": v for k, v in metrics.items()})
        result["seconds"] = time.time() - t0
        return result

    def generate(
        self, step: int, params, *, weights: WeightsSource | None = None, round_index: int = 0
    ) -> Generated:
        """The prompts of the next batch, sampled with `params` (decode layout) and scored.
        With `weights` (a source of the newest (version, params)), the sampling takes newer
        weights between decode chunks (`config.async_rl.inflight_updates`); the algorithm's
        requests use `params`."""
        c, roles, tokenizer = self.config, self.roles, self.parts.tokenizer
        group = c.rollout.group_size
        t0 = time.time()
        examples = next(self.parts.batcher)
        texts, ids = prompt_ids(
            tokenizer,
            examples,
            system_prompt=c.task.system_prompt,
            instruction_suffix=c.task.instruction_suffix,
        )
        group_ids = [i for i in ids for _ in range(group)]
        seed = round_seed(c, step, round_index)
        versions_bt = None
        if weights is None:
            rollout = roles.rollout.sample(group_ids, seed=seed, params=params)
        else:
            inflight = roles.rollout.sample_inflight(
                group_ids,
                seed=seed,
                weights=weights,
                chunk_tokens=c.async_rl.inflight_chunk_tokens,
            )
            rollout, versions_bt = inflight.rollout, inflight.versions_bt
        work = jax.device_get(roles.rollout.last_work)
        rollout = jax.device_get(rollout)
        completions = completion_texts(tokenizer, rollout)
        t_reward = time.time()
        group_texts = [t for t in texts for _ in range(group)]
        group_examples = [e for e in examples for _ in range(group)]
        reward_out = roles.reward(group_texts, completions, group_examples)
        t_requests = time.time()
        prompts = Prompts(examples, texts, ids, width=rollout.tokens.shape[1])
        served: dict[str, Any] = {}
        for request in self.algorithm.collects:
            served.update(self.servers[type(request)](request, prompts, params=params))
        seconds = {
            "rollout": t_reward - t0 + time.time() - t_requests,
            "reward": t_requests - t_reward,
        }
        return Generated(
            examples, rollout, completions, reward_out, None, work, seconds, versions_bt
        )._replace(**served)

    def greedy_baseline(self, request: GreedyBaseline, prompts: Prompts, *, params) -> dict:
        """`GreedyBaseline`: each prompt's greedy completion with `params`, scored, as the
        baseline reward of its G rows."""
        del request
        baseline = self.roles.rollout.greedy(prompts.ids, params=params)
        texts = completion_texts(self.parts.tokenizer, baseline)
        greedy_out = self.roles.reward(prompts.texts, texts, prompts.examples)
        return {"baseline_rewards": np.repeat(greedy_out.total, self.config.rollout.group_size)}

    def gold_references(self, request: GoldReferences, prompts: Prompts, *, params) -> dict:
        """`GoldReferences`: each prompt's gold answer rendered by the request's template,
        laid out like the rollout and scored by the reward role."""
        del params
        responses = [request.template.format(answer=e.answer) for e in prompts.examples]
        tokens, mask = response_rows(
            self.parts.tokenizer,
            prompts.ids,
            responses,
            width=prompts.width,
            max_new_tokens=self.config.rollout.max_new_tokens,
        )
        rewards = self.roles.reward(prompts.texts, responses, prompts.examples).total
        return {"references": References(tokens, mask, np.asarray(rewards, np.float32))}
