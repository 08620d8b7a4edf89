"""The `config.env` section: multi-turn episodes instead of single-turn rollouts.

With `config.env.name` set (a registered episode task: "calculator", "multi_if"), the online runner's collector plays
episodes (`jaxrl_llm.runners.EpisodePlayer`, `jaxrl_llm.envs.run_episodes`) in place of one
completion per prompt, under either schedule (synchronous or asynchronous); the algorithm
(`config.algorithm`) trains on them unchanged with one outcome reward per episode, or with
turn-level returns (`credit = "turn"`, `jaxrl_llm.algorithms.turn_credit`).
"""

from __future__ import annotations

import ml_collections

from jaxrl_llm.envs.base import EpisodeLimits

__all__ = ["CREDIT_MODES", "env_section", "episode_limits", "validate_env_section"]

# "outcome": the episode's summed reward through the algorithm's own advantages; "turn": each
# turn's advantage from its own and later turns' rewards (REFUEL, ArCHer).
CREDIT_MODES = ("outcome", "turn")


def env_section() -> ml_collections.ConfigDict:
    """The default `config.env` (single-turn: `name = ""`)."""
    c = ml_collections.ConfigDict()
    # "" (single-turn rollouts) or a registered episode task (jaxrl_llm/envs/tasks/):
    # "calculator" (reasoning-gym `config.task` with tools), "multi_if" (multi-turn instruction
    # following).
    c.name = ""
    # Tools of the tool-use task, comma separated: "calculator", "python" (the sandbox).
    c.tools = "calculator"
    # Wall-time limit of one tool call, seconds.
    c.tool_timeout_s = 2.0
    # The "python" tool runs model code only under a safe isolation (bubblewrap: its own
    # file-system view, namespaces, process and memory bounds; jaxrl_llm/envs/sandbox.py) and
    # refuses to start where none works. True accepts the unsafe fallback there (the code then
    # sees and can write the host's files): for machines whose files are not worth protecting.
    c.sandbox_unsafe = False
    # Per-episode limits (EpisodeLimits): model turns, tokens per turn, all tokens of an
    # episode (prompt, turns, observations; also the KV cache length).
    c.max_turns = 3
    c.max_turn_tokens = 64
    c.max_episode_tokens = 512
    # Credit assignment: "outcome" or "turn" (CREDIT_MODES); turn_discount discounts later
    # turns' rewards in a turn's return.
    c.credit = "outcome"
    c.turn_discount = 1.0
    # Episodes decoded together (0: every episode of a step) and how many ended turns the host
    # waits for before acting (0: a quarter of the slots).
    c.num_slots = 0
    c.refill_at = 0
    # Multi-IF conversations: user turns and new instructions per turn.
    c.multi_if_turns = 3
    c.multi_if_instructions = 1
    # SFT warm-up before RL on scripted demonstrations (tasks that have them): how many
    # demonstrations, optimizer steps, rows per step, learning rate. 0 steps: none.
    c.warmup_demos = 0
    c.warmup_steps = 0
    c.warmup_batch_size = 16
    c.warmup_learning_rate = 1e-4
    return c


def episode_limits(config: ml_collections.ConfigDict) -> EpisodeLimits:
    """`EpisodeLimits` of `config.env` (raises ValueError naming the bad field)."""
    env = config.env
    try:
        return EpisodeLimits(env.max_turns, env.max_turn_tokens, env.max_episode_tokens)
    except ValueError as e:
        raise ValueError(f"config.env: {e}") from e


def validate_env_section(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad `config.env` field and the fix."""
    from jaxrl_llm.envs.task_registry import get

    env = config.env
    if not env.name:
        return
    try:
        task = get(env.name)
    except KeyError as e:
        raise ValueError(e.args[0]) from e
    episode_limits(config)
    task.validate(config)
    if env.credit not in CREDIT_MODES:
        raise ValueError(f"config.env.credit={env.credit!r} must be one of {CREDIT_MODES}.")
    if env.credit == "turn" and config.algorithm not in ("grpo",):
        raise ValueError(
            f"config.env.credit='turn' works with the group-advantage algorithm 'grpo' (its "
            f"`loss.advantage` 'grpo' or 'rloo'); config.algorithm={config.algorithm!r} has its "
            "own credit assignment: use credit='outcome'."
        )
    if not 0.0 < env.turn_discount <= 1.0:
        raise ValueError(f"config.env.turn_discount={env.turn_discount} must be in (0, 1].")
    if env.num_slots < 0 or env.refill_at < 0 or env.tool_timeout_s <= 0:
        raise ValueError(
            f"config.env.num_slots={env.num_slots} and refill_at={env.refill_at} must be >= 0 "
            f"(0: automatic) and tool_timeout_s={env.tool_timeout_s} > 0."
        )
    if min(env.warmup_demos, env.warmup_steps, env.warmup_batch_size) < 0 or (
        env.warmup_steps and not env.warmup_demos
    ):
        raise ValueError(
            f"config.env.warmup_steps={env.warmup_steps} needs warmup_demos > 0 (got "
            f"{env.warmup_demos}); every warmup field must be >= 0."
        )
    from jaxrl_llm.constraints.config import constraint_spec

    if constraint_spec(config) is not None:
        raise ValueError(
            "config.env.name is set with config.constraints: judges score single completions, "
            "not episodes; clear config.constraints for episode runs."
        )
    if config.async_rl.enabled and config.async_rl.inflight_updates:
        raise ValueError(
            "config.env.name is set with config.async_rl.inflight_updates: an episode is played "
            "with one weight version; set config.async_rl.inflight_updates=False."
        )
