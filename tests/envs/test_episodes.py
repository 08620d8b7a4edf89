"""Multi-turn episodes on a tiny model: token-in/token-out rows, the log-prob invariant, limits."""

import time

import jax
import numpy as np
import pytest

from jaxrl_llm.envs.base import Environment, EpisodeLimits, StepResult
from jaxrl_llm.envs.chat import EpisodeRenderer
from jaxrl_llm.envs.episodes import MODEL, OBSERVATION, PROMPT, run_episodes
from jaxrl_llm.models import Tokenizer, init_model, tiny_config
from jaxrl_llm.rollout import GenerationConfig
from jaxrl_llm.rollout.episodes import EpisodeDecoder
from jaxrl_llm.training.logprobs import sequence_logprobs
from tests.models.helpers import write_tiny_tokenizer


class Scripted(Environment):
    """Answers every turn with a user message "more <k>" until `turns` turns; reward = turn k."""

    def __init__(self, turns: int = 3, sleep_s: float = 0.0, fail_at: int | None = None):
        self.turns, self.sleep_s, self.fail_at, self.k = turns, sleep_s, fail_at, 0

    def reset(self, example):
        return [{"role": "user", "content": f"the cat {example}"}]

    def step(self, reply):
        self.k += 1
        if self.fail_at == self.k:
            raise RuntimeError("environment bug")
        time.sleep(self.sleep_s)
        done = self.k >= self.turns
        return StepResult([{"role": "user", "content": f"more {self.k}"}], float(self.k), done)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    write_tiny_tokenizer(str(path))
    return Tokenizer.from_hf_directory(str(path))


@pytest.fixture(scope="module")
def model(tokenizer):
    return init_model(tiny_config(vocab_size=320, tie_word_embeddings=False), seed=0)


def _decoder(model, tokenizer, *, slots=4, width=96, temperature=1.0):
    config = GenerationConfig(
        max_new_tokens=1,
        temperature=temperature,
        eos_ids=tuple(tokenizer.stop_token_ids()),
        pad_id=tokenizer.pad_token_id,
    )
    return EpisodeDecoder(model, config, num_slots=slots, max_length=width)


def _play(model, tokenizer, envs, *, slots=4, width=96, turn_tokens=6, max_turns=4, **kw):
    limits = EpisodeLimits(
        max_turns=max_turns, max_turn_tokens=turn_tokens, max_episode_tokens=width
    )
    return run_episodes(
        _decoder(model, tokenizer, slots=slots, width=width),
        EpisodeRenderer(tokenizer),
        envs,
        list(range(len(envs))),
        limits=limits,
        seed=3,
        **kw,
    )


def test_rollout_logprobs_equal_trainer_logprobs_over_episodes(model, tokenizer):
    batch = _play(model, tokenizer, [Scripted(3) for _ in range(6)])
    r = batch.rollout
    assert batch.end_reasons == ["done"] * 6
    np.testing.assert_array_equal(batch.num_turns, 3)
    # observations sit between the turns and are not model tokens
    assert (batch.segments == OBSERVATION).sum(axis=1).min() > 0
    np.testing.assert_array_equal(r.completion_mask, batch.segments == MODEL)
    trainer, _ = jax.jit(lambda t: sequence_logprobs(model, t))(r.tokens)
    trainer = np.where(r.completion_mask, np.asarray(trainer), 0.0)
    np.testing.assert_allclose(r.raw_logprobs, trainer, atol=1e-5)
    np.testing.assert_allclose(r.logprobs, trainer, atol=1e-5)  # temperature 1, no filter
    np.testing.assert_array_equal(batch.turn_rewards[:, :3], [[1, 2, 3]] * 6)
    assert np.isnan(batch.turn_rewards[:, 3]).all()


def test_rows_hold_prompt_turns_and_rendered_observations(model, tokenizer):
    batch = _play(model, tokenizer, [Scripted(2)])
    renderer = EpisodeRenderer(tokenizer)
    row, seg = batch.rollout.tokens[0], batch.segments[0]
    prompt = renderer.prompt_ids([{"role": "user", "content": "the cat 0"}])
    np.testing.assert_array_equal(row[: len(prompt)], prompt)
    assert (seg[: len(prompt)] == PROMPT).all()
    turn0 = np.nonzero(batch.turn_index[0] == 0)[0]
    obs = np.nonzero(seg == OBSERVATION)[0]
    assert obs[0] == turn0[-1] + 1  # the observation follows the turn directly
    expected = renderer.observation_ids(
        [{"role": "user", "content": "more 1"}], last_token=row[turn0[-1]]
    )
    np.testing.assert_array_equal(row[obs], expected)
    text = tokenizer.decode(row[obs].tolist())
    assert text.endswith("<|im_start|>user\nmore 1<|im_end|>\n<|im_start|>assistant\n")
    # the separator comes from the template: the end-of-turn token only when the turn lacked it
    closed = row[turn0[-1]] == tokenizer.token_to_id("<|im_end|>")
    assert text.startswith("\n" if closed else "<|im_end|>\n")


def test_episode_is_independent_of_slots_and_batch(model, tokenizer):
    alone = _play(model, tokenizer, [Scripted(3) for _ in range(3)], slots=1)
    together = _play(model, tokenizer, [Scripted(3) for _ in range(3)], slots=4)
    np.testing.assert_array_equal(alone.rollout.tokens, together.rollout.tokens)
    np.testing.assert_allclose(alone.rollout.raw_logprobs, together.rollout.raw_logprobs, atol=1e-5)


def test_observations_prefill_only_their_tokens(model, tokenizer):
    batch = _play(model, tokenizer, [Scripted(3) for _ in range(4)], slots=4)
    appended = (batch.segments == PROMPT).sum() + (batch.segments == OBSERVATION).sum()
    # and the last token of each turn that an observation follows
    continued = (batch.num_turns - 1).sum()
    assert batch.metrics["work/prefill_tokens"] == appended + continued
    # one forward per sampled token besides each turn's first, which comes from the append
    model_tokens = batch.rollout.completion_mask.sum()
    assert batch.metrics["work/decode_active_steps"] == model_tokens - batch.num_turns.sum()


def test_limits_end_episodes_with_reasons(model, tokenizer):
    batch = _play(
        model, tokenizer, [Scripted(10), Scripted(10), Scripted(3, fail_at=2)], max_turns=3
    )
    assert batch.end_reasons == ["max_turns", "max_turns", "env_error"]
    assert batch.metrics["episode/end/max_turns"] == 2
    assert batch.metrics["episode/end/env_error"] == 1
    short = _play(model, tokenizer, [Scripted(10)], width=48, turn_tokens=6)
    assert short.end_reasons == ["max_episode_tokens"]
    assert short.rollout.sequence_lengths[0] <= 48


def test_slow_step_does_not_hold_the_batch(model, tokenizer):
    envs = [Scripted(1, sleep_s=1.5)] + [Scripted(4) for _ in range(3)]
    batch = _play(model, tokenizer, envs, slots=4, width=192)
    assert batch.end_reasons == ["done"] * 4
    # the three fast episodes took several host rounds while the slow step ran
    assert batch.metrics["episode/host_rounds"] >= 4


def test_decode_encode_round_trip_changes_ids_but_episodes_keep_sampled_ids(model, tokenizer):
    """Re-encoding a sampled turn's text gives other ids (TRL #5224); the rows keep the sampled
    ones, which is what makes the trainer's log-probs line up with the rollout's."""
    batch = _play(model, tokenizer, [Scripted(3) for _ in range(6)])
    r = batch.rollout
    changed = 0
    for b in range(r.tokens.shape[0]):
        for turn in range(batch.num_turns[b]):
            ids = r.tokens[b][batch.turn_index[b] == turn].tolist()
            reencoded = tokenizer.encode(tokenizer.decode(ids))
            changed += reencoded != ids
    assert changed > 0  # the random model's turns are not in canonical tokenization
    # the sampled ids are what the sampler scored: the rollout log-probs are theirs
    trainer, _ = jax.jit(lambda t: sequence_logprobs(model, t))(r.tokens)
    np.testing.assert_allclose(
        r.raw_logprobs, np.where(r.completion_mask, np.asarray(trainer), 0.0), atol=1e-5
    )


class ScriptedTools(Environment):
    """A `ToolEnv` whose "model" replies are scripted (the sampled text is ignored), so real
    tool calls with faults run inside `run_episodes`."""

    def __init__(self, replies):
        from jaxrl_llm.envs.tool_env import ToolEnv
        from jaxrl_llm.envs.tools import Tool

        def boom(x: str):
            raise RuntimeError("tool bug")

        def hang(x: str):
            time.sleep(5)

        def loud(x: str):
            return "y" * 1_000_000

        schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
        tools = [
            Tool("boom", "raises", schema, boom),
            Tool("hang", "hangs", schema, hang, timeout_s=0.2),
            Tool("loud", "prints a megabyte", schema, loud, max_output_chars=100),
        ]
        self.inner, self.replies = ToolEnv(tools, system_prompt="tools"), list(replies)

    def reset(self, example):
        return self.inner.reset(type("E", (), {"question": "q", "score": lambda s, a: 0.0})())

    def step(self, reply):
        return self.inner.step(self.replies.pop(0))


def test_tool_faults_are_counted_and_do_not_stop_the_run(model, tokenizer):
    call = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'
    replies = [
        call.format("boom", '{"x": "1"}')
        + call.format("hang", '{"x": "1"}')
        + call.format("loud", '{"x": "1"}'),
        call.format("boom", '{"y": 1}') + call.format("nope", '{"x": "1"}'),
        '<tool_call>{"name": "boom", "arguments": {"x": "never closed"',
        "42",
    ]
    batch = _play(model, tokenizer, [ScriptedTools(replies)], width=2048, max_turns=6)
    m = batch.metrics
    assert batch.end_reasons == ["done"]
    assert batch.num_turns[0] == 4
    assert m["episode/tool/error"] == 1
    assert m["episode/tool/timeout"] == 1
    assert m["episode/tool/ok"] == 1 and m["episode/tool/truncated"] == 1
    assert m["episode/tool/bad_arguments"] == 1 and m["episode/tool/unknown_tool"] == 1
    assert m["episode/tool_call/unclosed"] == 1
    assert m["episode/tool_call/attempts"] == 6 and m["episode/tool_call/well_formed"] == 5
    # the megabyte reached the model cut to the tool's limit, with a marker
    text = "\n".join(t for role, t in batch.transcripts[0] if role == "observation")
    assert "truncated" in text and len(text) < 5_000


def test_conversation_outgrowing_the_context_ends_the_episode(model, tokenizer):
    long = "<tool_call>" + '{"name": "loud", "arguments": {"x": "1"}}' + "</tool_call>"
    batch = _play(model, tokenizer, [ScriptedTools([long] * 8)], width=160, max_turns=8)
    assert batch.end_reasons == ["max_episode_tokens"]
    assert batch.metrics["episode/end/max_episode_tokens"] == 1
    assert batch.rollout.sequence_lengths[0] <= 160


def test_renderer_takes_the_separator_from_the_template(tokenizer, tmp_path):
    renderer = EpisodeRenderer(tokenizer)
    messages = [{"role": "tool", "content": "408"}]
    opener = "<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n"
    assert renderer.observation_text(messages, turn_closed=True) == "\n" + opener
    assert renderer.observation_text(messages, turn_closed=False) == "<|im_end|>\n" + opener
    assert renderer.end_of_turn_id == tokenizer.token_to_id("<|im_end|>")
    # a tokenizer without a chat template (the plain Question:/Answer: format) has no turns
    import json
    import os

    write_tiny_tokenizer(str(tmp_path))
    path = os.path.join(tmp_path, "tokenizer_config.json")
    config = json.load(open(path))
    del config["chat_template"]
    json.dump(config, open(path, "w"))
    with pytest.raises(ValueError, match="chat template"):
        EpisodeRenderer(Tokenizer.from_hf_directory(str(tmp_path)))
