"""Multi-turn episodes against a single-turn batch of the same tokens, and TRL's tool loop.

    .venv/bin/python experiments/benchmarks/multi_turn.py            # SmolLM2-135M-Instruct
    .venv/bin/python experiments/benchmarks/multi_turn.py --tiny     # a tiny random model

1. Cost of turns. `--episodes` episodes of `--turns` model turns of exactly `--turn_tokens`
   tokens each (end-of-turn ids disabled, so every turn runs to its budget), with a scripted
   user message of M tokens between turns, through `run_episodes` (append only the new tokens
   to each slot's KV cache, decode until turns end, host round trips between). Against: one
   single-turn `Generator` batch of the same model with the same token counts: prompts of the
   episode's prompt plus (turns - 1) observations, and turns x turn_tokens new tokens. Both
   sample the same number of tokens and run the same number of prompt/observation tokens
   through the model; the ratio (median of `--repeats`, after a compiling warm-up) is what the
   turns cost on top (target <= 1.2x).
2. TRL. `trl.GRPOTrainer(..., tools=[calculator])` on the same model exported to a Hugging
   Face directory: it is constructed, and whatever stops it is printed as the finding.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import traceback


def _timed(fn, repeats: int) -> tuple[float, object]:
    out = fn()  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--turn_tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip_trl", action="store_true")
    args = parser.parse_args()
    if not getattr(args, "worker", None):  # the parent prints the header, once
        from machine import benchmark_header

        print(benchmark_header("multi_turn.py"), flush=True)

    from jaxrl_llm.envs.base import Environment, EpisodeLimits, StepResult
    from jaxrl_llm.envs.chat import EpisodeRenderer
    from jaxrl_llm.envs.episodes import OBSERVATION, run_episodes
    from jaxrl_llm.models import from_pretrained, init_model, tiny_config
    from jaxrl_llm.models.gguf_loader import read_gguf, tokenizer_from_gguf
    from jaxrl_llm.models.registry import resolve_model_path
    from jaxrl_llm.rollout import GenerationConfig, Generator
    from jaxrl_llm.rollout.episodes import EpisodeDecoder

    if args.tiny:
        tokenizer = tokenizer_from_gguf(read_gguf(resolve_model_path("smollm2-135m-instruct")))
        model = init_model(tiny_config(vocab_size=tokenizer.vocab_size), seed=0)
        name = "tiny random (2 layers, D=64)"
    else:
        model, tokenizer = from_pretrained("smollm2-135m-instruct")
        name = "SmolLM2-135M-Instruct"
    turns, n = args.turns, args.turn_tokens
    user = "Please go on, and keep it short."

    class Scripted(Environment):
        def __init__(self):
            self.k = 0

        def reset(self, example):
            return [{"role": "user", "content": f"Tell me about topic {example}."}]

        def step(self, reply):
            self.k += 1
            return StepResult([{"role": "user", "content": user}], 0.0, self.k >= turns)

    renderer = EpisodeRenderer(tokenizer)
    prompts = [renderer.prompt_ids(Scripted().reset(i)) for i in range(args.episodes)]
    obs = renderer.observation_ids([{"role": "user", "content": user}], last_token=0)
    width = max(map(len, prompts)) + (turns - 1) * (len(obs) + 1) + turns * n + 8
    limits = EpisodeLimits(max_turns=turns, max_turn_tokens=n, max_episode_tokens=width)
    config = GenerationConfig(max_new_tokens=turns * n, temperature=1.0, eos_ids=(), pad_id=0)
    decoder = EpisodeDecoder(model, config, num_slots=args.episodes, max_length=width)

    def episodes():
        envs = [Scripted() for _ in range(args.episodes)]
        return run_episodes(
            decoder, renderer, envs, list(range(args.episodes)), limits=limits, seed=1
        )

    generator = Generator(model, config.replace(compaction=False, prefix_sharing="none"))
    # the single-turn batch: each prompt extended by the observations' tokens (a turn ends on
    # a budget here, so each observation starts with the end-of-turn token: one more token)
    separator = renderer.observation_ids([{"role": "user", "content": user}], last_token=-1)
    single_prompts = [p + separator * (turns - 1) for p in prompts]

    def single():
        return generator(single_prompts, seed=1)

    t_multi, batch = _timed(episodes, args.repeats)
    t_single, rollout = _timed(single, args.repeats)
    model_tokens = int(batch.rollout.completion_mask.sum())
    obs_tokens = int((batch.segments == OBSERVATION).sum())
    assert model_tokens == int(rollout.completion_mask.sum()) == args.episodes * turns * n
    print(f"# Multi-turn episodes vs one single-turn batch ({name}, CPU, {time.strftime('%F')})")
    print(
        f"{args.episodes} episodes x {turns} turns x {n} tokens; observation {len(separator)} tokens"
    )
    print("| batch | model tokens | prompt + observation tokens | host rounds | seconds |")
    print("|---|---|---|---|---|")
    rounds = int(batch.metrics["episode/host_rounds"])
    prompt_tokens = sum(map(len, prompts))
    print(
        f"| {turns}-turn episodes | {model_tokens} | {prompt_tokens + obs_tokens} | {rounds} | {t_multi:.3f} |"
    )
    single_in = sum(map(len, single_prompts))
    print(
        f"| single-turn batch | {int(rollout.completion_mask.sum())} | {single_in} | 1 | {t_single:.3f} |"
    )
    ratio = t_multi / t_single
    print(
        f"ratio episodes / single-turn: {ratio:.2f}x (target <= 1.2x): {'met' if ratio <= 1.2 else 'MISSED'}"
    )

    if args.skip_trl:
        return
    print("\n# TRL GRPOTrainer with tools=[calculator], same model")
    try:
        import trl
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from jaxrl_llm.models.hf import save_hf

        directory = tempfile.mkdtemp(prefix="trl_tools_")
        save_hf(model, tokenizer, directory)
        hf_model = AutoModelForCausalLM.from_pretrained(directory)
        hf_tokenizer = AutoTokenizer.from_pretrained(directory)

        def calculator(expression: str) -> str:
            """Evaluates an arithmetic expression.

            Args:
                expression: the expression, e.g. 12 * 34
            """
            from jaxrl_llm.envs.calculator import evaluate_expression, format_result

            return format_result(evaluate_expression(expression))

        data = Dataset.from_list(
            [{"prompt": [{"role": "user", "content": "What is 361 * 220?"}]}] * 8
        )
        trainer = trl.GRPOTrainer(
            model=hf_model,
            processing_class=hf_tokenizer,
            reward_funcs=lambda completions, **kw: [0.0] * len(completions),
            train_dataset=data,
            tools=[calculator],
            args=trl.GRPOConfig(
                output_dir=directory, per_device_train_batch_size=4, num_generations=4,
                max_completion_length=n, max_steps=1, use_cpu=True, report_to=[],
            ),
        )  # fmt: skip
        start = time.perf_counter()
        trainer.train()
        print(
            f"TRL trl=={trl.__version__}: one GRPO step with tools took {time.perf_counter() - start:.1f} s"
        )
    except Exception as e:  # noqa: BLE001 - what stops TRL is the finding
        print(f"TRL stopped: {type(e).__name__}: {e}")
        traceback.print_exc(limit=3)


if __name__ == "__main__":
    main()
