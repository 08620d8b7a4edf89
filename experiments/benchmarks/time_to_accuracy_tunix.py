"""Tunix's side of `time_to_accuracy.py`: Google's Tunix GRPO learner on the same recipe.

Tunix pins its own jax, so it runs in an interpreter of its own (`--tunix-python`), where
jaxrl_llm is not installed. `run_tunix` (in our interpreter) starts `tunix_worker` there and
serves it over stdio: the worker sends each step's completions for our reward (the run's
`RewardRunner`) and, at each evaluation, its weights as a safetensors snapshot for our evaluator
(its clock paused while it writes them), and stops when the reply says so. The model setup is
`tunix_grpo.py`'s (its rope-theta fix, its pad token, micro batches of `TUNIX_TRAIN_MICRO`).

    python3.11 -m venv /tmp/tunix_venv && /tmp/tunix_venv/bin/pip install google-tunix==0.1.7
    python experiments/benchmarks/time_to_accuracy.py --tunix-python /tmp/tunix_venv/bin/python
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time

from time_to_accuracy import (
    SYSTEMS,
    Curve,
    Race,
    TrainingClock,
    held_out_evaluator,
    reward_by_index,
    training_prompts,
    trl_arguments,
)

# Tunix's names for our loss aggregations (`config.loss.agg`).
TUNIX_LOSS_AGG = {
    "token-mean": "token-mean",
    "seq-mean-token-mean": "sequence-mean-token-mean",
    "seq-mean-token-sum-norm": "sequence-mean-token-sum-norm",
}
# Prompts per gradient-accumulation micro batch on Tunix's side (x group sequences), as in
# `tunix_grpo.py`: Tunix's whole train batch at once ran out of a 24 GB machine's memory.
TUNIX_TRAIN_MICRO = 2
# The marker of the worker's requests on its stdout (Tunix's own output is left alone).
TUNIX_REQUEST = "TTA_REQUEST "


def tunix_recipe(config, race: Race) -> dict:
    """What Tunix's GRPO learner is given: TRL's mirror of the recipe (its refusals included)
    and the fields Tunix adds.

    Raises:
      ValueError: naming a config field Tunix's learner cannot mirror here, and the fix.
    """
    trl = trl_arguments(config, max_steps=race.max_steps, output_dir="")
    refused = {
        "config.loss.kl_beta": (config.loss.kl_beta != 0, "0 (no reference model on Tunix's side)"),
        "config.loss.normalize_std": (not config.loss.normalize_std, "True"),
        "config.optimizer.schedule": (config.optimizer.schedule != "constant", "'constant'"),
        "config.stabilise.overlong": (config.stabilise.overlong != "none", "'none'"),
        "config.rollout.num_prompts": (
            config.rollout.num_prompts % TUNIX_TRAIN_MICRO,
            f"a multiple of {TUNIX_TRAIN_MICRO}",
        ),
    }
    for field, (bad, fix) in refused.items():
        if bad:
            raise ValueError(f"{field} has no Tunix GRPOLearner twin here: set it to {fix}.")
    keys = ("learning_rate", "warmup_steps", "adam_beta1", "adam_beta2", "weight_decay")
    return dict(
        {k: trl[k] for k in keys},
        prompts=config.rollout.num_prompts,
        group=config.rollout.group_size,
        max_new_tokens=config.rollout.max_new_tokens,
        temperature=config.rollout.temperature,
        max_grad_norm=config.optimizer.max_grad_norm,
        epsilon=config.loss.clip_low,
        epsilon_high=config.loss.clip_high,
        loss_agg_mode=TUNIX_LOSS_AGG[config.loss.agg],
        seed=config.seed,
        **dataclasses.asdict(race),
    )


def run_tunix(config, export_dir: str, race: Race, workdir: str, *, tunix_python: str) -> Curve:
    """Tunix's GRPO learner in `tunix_python` (`tunix_worker`), served from here: it
    sends its completions for our reward and its weights (a safetensors snapshot, its clock
    paused) for our evaluator, and stops when the reply says so."""
    import subprocess

    import safetensors.numpy

    from jaxrl_llm.models.weights import assign_hf_tensors

    eval_model, tokenizer, held_out_accuracy = held_out_evaluator(config, export_dir)
    examples, prompts = training_prompts(config, tokenizer, race.max_steps)
    score = reward_by_index(config, examples)
    job = dict(
        export_dir=export_dir,
        snapshot=os.path.join(workdir, "tunix_snapshot.safetensors"),
        prompts=prompts,
        recipe=tunix_recipe(config, race),
    )
    job_path = os.path.join(workdir, "tunix_job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    stderr_path = os.path.join(workdir, "tunix_stderr.txt")
    curve = Curve(SYSTEMS["tunix"])
    with open(stderr_path, "w") as stderr:
        worker = subprocess.Popen(
            [tunix_python, os.path.abspath(__file__), job_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        for line in worker.stdout:
            if not line.startswith(TUNIX_REQUEST):
                continue
            request = json.loads(line[len(TUNIX_REQUEST) :])
            if request["op"] == "reward":
                reply = {
                    "rewards": score(request["prompts"], request["completions"], request["indices"])
                }
            elif request["op"] == "evaluate":
                start = time.perf_counter()
                weights = safetensors.numpy.load_file(job["snapshot"])
                assign_hf_tensors(eval_model, weights, source="Tunix's policy")
                accuracy = held_out_accuracy()
                step, wall_s = request["step"], request["wall_s"]
                curve.add(step, wall_s, accuracy, request["save_s"] + time.perf_counter() - start)
                curve.stopped_by = race.stop_reason(accuracy, wall_s, step) or ""
                reply = {"stop": bool(curve.stopped_by)}
            else:  # "done"
                curve.peak_rss_gb = request["peak_rss_gb"]
                reply = {}
            with contextlib.suppress(BrokenPipeError):  # a worker that died: its stdout ends
                worker.stdin.write(json.dumps(reply) + "\n")
                worker.stdin.flush()
        worker.wait()
    code = worker.returncode
    if code != 0:
        how = f"exit code {code}" if code > 0 else f"killed by signal {-code}"
        how += " (SIGKILL: out of memory?)" if code == -9 else ""
        with open(stderr_path) as f:
            failure = f"Tunix's worker failed, {how}: {f.read()[-3000:]}"
        if not curve.points:
            raise RuntimeError(failure)
        print(f"# {failure}", flush=True)
        curve.stopped_by = "failure"  # its points so far still go into the table
    return curve


def tunix_worker(job_path: str) -> None:
    """Tunix's side, in the Tunix interpreter (no jaxrl_llm there): `tunix_grpo.py`'s model
    setup, the recipe's learner, rewards and evaluations asked of `run_tunix` over stdio."""
    import resource

    import numpy as np
    import optax
    import safetensors.numpy
    import transformers
    from flax import nnx
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner
    from tunix_grpo import PROMPT_WINDOW, cluster_config, load_llama

    with open(job_path) as f:
        job = json.load(f)
    recipe, export_dir = job["recipe"], job["export_dir"]
    race = Race(**{f.name: recipe[f.name] for f in dataclasses.fields(Race)})

    def ask(op: str, **fields) -> dict:
        print(TUNIX_REQUEST + json.dumps(dict(op=op, **fields)), flush=True)
        return json.loads(sys.stdin.readline())

    clock = TrainingClock()
    tokenizer = transformers.AutoTokenizer.from_pretrained(export_dir)
    tokenizer.pad_token = "<|endoftext|>"  # Tunix masks every pad id, prompts too (tunix_grpo.py)
    window = max(PROMPT_WINDOW, max(len(tokenizer.encode(p)) for p in job["prompts"]))
    model, mesh = load_llama(export_dir)
    rate = recipe["learning_rate"]
    schedule = optax.join_schedules(  # ours: linear warmup from 0, then constant
        [
            optax.linear_schedule(0.0, rate, max(recipe["warmup_steps"], 1)),
            optax.constant_schedule(rate),
        ],
        [recipe["warmup_steps"]],
    )
    optimizer = optax.chain(
        optax.clip_by_global_norm(recipe["max_grad_norm"]),
        optax.adamw(
            schedule,
            b1=recipe["adam_beta1"],
            b2=recipe["adam_beta2"],
            weight_decay=recipe["weight_decay"],
        ),
    )
    prompts = recipe["prompts"]
    config = cluster_config(
        mesh,
        optimizer,
        prompts=prompts,
        train_micro=TUNIX_TRAIN_MICRO,
        max_steps=race.max_steps,
        max_new=recipe["max_new_tokens"],
        prompt_window=window,
        temperature=recipe["temperature"],
        seed=recipe["seed"],
    )
    cluster = rlc.RLCluster(actor=model, reference=None, tokenizer=tokenizer, cluster_config=config)
    algorithm = grpo_learner.GRPOConfig(
        num_generations=recipe["group"],
        num_iterations=1,
        beta=0.0,
        epsilon=recipe["epsilon"],
        loss_agg_mode=recipe["loss_agg_mode"],
    )
    algorithm.epsilon_high = recipe["epsilon_high"]  # read by Tunix's loss when present

    def task_reward(prompts, completions, example_index, **_):
        """Our reward (the run's `RewardRunner`), computed by `run_tunix`."""
        indices = [int(i) for i in example_index]
        return ask("reward", prompts=list(prompts), completions=list(completions), indices=indices)[
            "rewards"
        ]

    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, algo_config=algorithm, reward_fns=task_reward
    )

    def evaluate(step: int) -> bool:
        """Sends the actor's weights to be evaluated, the clock paused; whether to stop."""
        wall_s = clock.elapsed()
        with clock.paused():
            start = time.perf_counter()
            state = nnx.state(cluster.actor_trainer.model, nnx.Param).to_pure_dict()
            safetensors.numpy.save_file(tunix_hf_tensors(state), job["snapshot"])
            reply = ask("evaluate", step=step, wall_s=wall_s, save_s=time.perf_counter() - start)
        return reply["stop"]

    def batches():
        for step in range(race.max_steps):
            rows = range(step * prompts, (step + 1) * prompts)
            yield {
                "prompts": np.array([job["prompts"][i] for i in rows]),
                "example_index": np.array(list(rows)),
            }

    run_global_step, steps = learner._run_global_step, 0

    def step_then_evaluate(*args, **kwargs):
        """One global step; then the evaluation `race` asks for. Tunix's loop ends on
        StopIteration (its end-of-data signal)."""
        nonlocal steps
        run_global_step(*args, **kwargs)
        steps += 1
        if race.evaluates_after(steps, clock.elapsed()) and evaluate(steps):
            raise StopIteration

    learner._run_global_step = step_then_evaluate  # the learner has no step hook
    if not evaluate(0):
        learner.train(batches())
    ask("done", peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9)


def tunix_hf_tensors(state: dict) -> dict:
    """Hugging Face tensors of a Tunix Llama3's parameters (`nnx.state(...).to_pure_dict()`):
    the inverse of Tunix's own safetensors loader (`tunix.models.llama3.params`)."""
    import numpy as np

    def linear(w):  # Tunix [in, ...] -> HF [out, in]
        return np.ascontiguousarray(np.asarray(w).reshape(w.shape[0], -1).T)

    tensors = {
        "model.embed_tokens.weight": np.asarray(state["embedder"]["input_embedding"]),
        "model.norm.weight": np.asarray(state["final_norm"]["w"]),
    }
    for i, layer in state["layers"].items():
        prefix, attn = f"model.layers.{i}.", layer["attn"]
        for name in ("q_proj", "k_proj", "v_proj"):  # [D, N, H]
            tensors[f"{prefix}self_attn.{name}.weight"] = linear(attn[name]["w"])
        o = np.asarray(attn["o_proj"]["w"])  # [N, H, D]
        tensors[f"{prefix}self_attn.o_proj.weight"] = linear(o.reshape(-1, o.shape[-1]))
        for name in ("gate_proj", "up_proj", "down_proj"):
            tensors[f"{prefix}mlp.{name}.weight"] = linear(layer["mlp"][name]["kernel"])
        tensors[f"{prefix}input_layernorm.weight"] = np.asarray(layer["input_layernorm"]["w"])
        tensors[f"{prefix}post_attention_layernorm.weight"] = np.asarray(
            layer["post_attention_layernorm"]["w"]
        )
    if "lm_head" in state:  # untied output head
        tensors["lm_head.weight"] = linear(state["lm_head"]["w"])
    return tensors


if __name__ == "__main__":
    tunix_worker(sys.argv[1])
