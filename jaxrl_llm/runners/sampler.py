"""The single-turn sampler: G sampled completions per prompt, scored by the reward role.

The collector of every run without `config.env` (`jaxrl_llm.runners.collectors`). Each round it
draws the next prompts, samples G completions of each with the rollout's weights (taking newer
weights between decode chunks when the schedule offers them), scores them, and serves the
algorithm's collection requests (`Algorithm.collects`): a greedy completion of every prompt,
scored (`GreedyBaseline`, ReMax), or each prompt's gold answer rendered as one more completion
(`GoldReferences`, RRHF), and any request with a registered server
(`jaxrl_llm.algorithms.collected`), each from one `CollectContext` of the round. Held-out
evaluation decodes the task's (and `config.eval.tasks`') held-out prompts (`jaxrl_llm.evals`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import numpy as np

from jaxrl_llm.algorithms.base import Algorithm, GoldReferences, GreedyBaseline, References
from jaxrl_llm.algorithms.collected import CollectContext, serve_collected
from jaxrl_llm.evals import Evaluator
from jaxrl_llm.evals.suite import flat_set_metrics
from jaxrl_llm.rollout.chat import completion_texts, prompt_ids, response_rows
from jaxrl_llm.rollout.inflight import WeightsSource
from jaxrl_llm.runners.collectors import Collector, Generated, round_seed
from jaxrl_llm.runners.components import Roles, RunParts, build_eval_sets, build_scorer
from jaxrl_llm.runners.evaluation import eval_settings

__all__ = ["SingleTurnSampler"]


def greedy_baseline(request: GreedyBaseline, context: CollectContext) -> dict:
    """`GreedyBaseline`: each prompt's greedy completion with the round's weights, scored, as
    the baseline reward of its G rows."""
    del request
    baseline = context.greedy(context.prompt_ids)
    texts = completion_texts(context.tokenizer, baseline)
    greedy_out = context.score(context.prompt_texts, texts, context.examples)
    return {"baseline_rewards": context.per_sample(greedy_out.total)}


def gold_references(request: GoldReferences, context: CollectContext) -> dict:
    """`GoldReferences`: each prompt's gold answer rendered by the request's template, laid out
    like the rollout and scored by the reward role."""
    responses = [request.template.format(answer=e.answer) for e in context.examples]
    tokens, mask = response_rows(
        context.tokenizer,
        context.prompt_ids,
        responses,
        width=context.rollout.tokens.shape[1],
        max_new_tokens=context.config.rollout.max_new_tokens,
    )
    rewards = context.score(context.prompt_texts, responses, context.examples).total
    return {"references": References(tokens, mask, np.asarray(rewards, np.float32))}


# The built-in requests' servers, each returning `Generated` fields.
BUILT_IN_SERVERS = {GreedyBaseline: greedy_baseline, GoldReferences: gold_references}


class SingleTurnSampler(Collector):
    """Sampled single completions of prompts (see the module docstring).

    Args:
      config: the run config.
      algorithm: the run's `Algorithm`; its `collects` requests are served each round.
      parts: the run's model, tokenizer, prompt batcher and rewards.
      roles: the run's roles (the rollout samples, the reward scores).
    """

    description = "the single-turn sampler"
    served_requests = tuple(BUILT_IN_SERVERS)

    def __init__(self, config, algorithm: Algorithm, parts: RunParts, roles: Roles):
        self.check(algorithm)
        self.config, self.algorithm, self.parts, self.roles = config, algorithm, parts, roles
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
        result = flat_set_metrics(results, self.config.task.name)
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
        context = CollectContext(
            config=c,
            examples=examples,
            group_size=group,
            rollout=rollout,
            completions=completions,
            rewards=np.asarray(reward_out.total, np.float32),
            tokenizer=tokenizer,
            prompt_texts=texts,
            prompt_ids=ids,
            greedy=functools.partial(roles.rollout.greedy, params=params),
            score=roles.reward,
        )
        served: dict[str, Any] = {}
        for request in self.algorithm.collects:
            if type(request) in BUILT_IN_SERVERS:
                served.update(BUILT_IN_SERVERS[type(request)](request, context))
        collected = serve_collected(self.algorithm.collects, context)
        seconds = {
            "rollout": t_reward - t0 + time.time() - t_requests,
            "reward": t_requests - t_reward,
        }
        return Generated(
            examples, rollout, completions, reward_out, None, work, seconds, versions_bt,
            collected=collected,
        )._replace(**served)  # fmt: skip
