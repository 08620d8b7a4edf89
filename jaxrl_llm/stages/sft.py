"""The SFT stage: supervised fine-tuning of the policy on (prompt, response) records.

    python -m jaxrl_llm.main --config experiments/configs/sft_smollm2.py --workdir runs/sft

Stage one of InstructGPT's pipeline ("Training language models to follow instructions with
human feedback", 2203.02155). Records come from `config.sft.data` (`jaxrl_llm.data.sft`): "task"
(the run's reasoning-gym task, each gold answer rendered by `config.sft.response_template`), a
`.jsonl` file of {"prompt", "response"} lines, or "tfds:<file.jsonl>" (GSM8K-style question /
answer lines through the tfds builder). The policy trains on the masked next-token loss
(`jaxrl_llm.training.sft`), packed rows by default, through the same `Learner` role as RL.

It logs the train loss every step, the held-out loss and token accuracy every
`sft.eval_every` steps, and the task's held-out greedy accuracy before and after
(`config.eval`: `eval.before` / `eval.after`, when the records carry answers); checkpoints every `train.checkpoint_every`
steps and resumes from the newest; at the end writes the fine-tuned policy as a Hugging Face
directory, `<workdir>/model`, which the next stage loads with `--config.model.name=<workdir>/model`.
"""

from __future__ import annotations

import functools
import os

import jax
import ml_collections
import numpy as np

from jaxrl_llm.data.jsonl import check_no_duplicates
from jaxrl_llm.data.presets import resolve_task, task_pool
from jaxrl_llm.data.sft import (
    DEFAULT_RESPONSE_TEMPLATE,
    SftRecord,
    read_sft_jsonl,
    records_from_examples,
)
from jaxrl_llm.data.split import DEFAULT_SELECTION_FRACTION, partition
from jaxrl_llm.data.tfds_source import TfdsSource
from jaxrl_llm.evals import EvalSet
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.runners.components import load_policy, with_lora
from jaxrl_llm.stages.data import RecordBatches, record_options
from jaxrl_llm.stages.parts import (
    GreedyEvaluation,
    PolicyEvaluation,
    check_fit_fields,
    check_positive_ints,
    stage_config,
    stage_learner,
    task_accuracy_change,
)
from jaxrl_llm.stages.supervised import SupervisedStage, save_policy, train_stage
from jaxrl_llm.training.sft import make_sft_batch, sft_loss, token_accuracy, tokenize_records


def sft_section() -> ml_collections.ConfigDict:
    """The `config.sft` fields."""
    c = ml_collections.ConfigDict()
    # "task" (the run's task with gold answers), a .jsonl path, or "tfds:<path.jsonl>".
    c.data = "task"
    # How a gold answer becomes a response ("task" and "tfds:" data).
    c.response_template = DEFAULT_RESPONSE_TEMPLATE
    c.batch_size = 8  # records per optimizer update
    c.max_length = 256  # tokens per record (prompt + response); rows are this wide
    c.pack = True  # several records per row (fewer, fuller rows)
    c.pack_row_multiple = 4  # packed row counts round up to this (few compiled train steps)
    c.eval_records = 64  # held-out records for the loss (at most; the file's held-out side)
    c.eval_every = 0  # steps between held-out loss evaluations (0: before and after only)
    return c


def sft_config() -> ml_collections.ConfigDict:
    """The default SFT configuration (SmolLM2-135M-Instruct on chain_sum's gold answers)."""
    return stage_config("sft", "sft", sft_section())


def validate_sft_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of an SFT config, and the fix."""
    s = config.sft
    check_positive_ints(
        config, "sft", ("batch_size", "max_length", "eval_records", "pack_row_multiple")
    )
    check_fit_fields(config, "sft")
    data = s.data
    if data == "task":
        resolve_task(config.task.name, config.task.kwargs.to_dict())
    elif data.startswith("tfds:") or data.endswith(".jsonl"):
        path = data.removeprefix("tfds:")
        if not os.path.isfile(path):
            raise ValueError(f"config.sft.data={data!r}: file {path!r} does not exist.")
    else:
        raise ValueError(
            f"config.sft.data={data!r} must be 'task', a .jsonl path or 'tfds:<path.jsonl>'."
        )
    if "{answer}" not in s.response_template:
        raise ValueError(
            f"config.sft.response_template={s.response_template!r} must contain '{{answer}}'."
        )


def train_sft(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the SFT stage; returns its summary (also `<workdir>/summary.json`)."""
    return train_stage(SFT, config, workdir, progress=progress)


def _report(summary: dict) -> str:
    before, after = summary["before"]["eval/loss"], summary["after"]["eval/loss"]
    line = f"[jaxrl_llm] SFT held-out loss {before:.3f} -> {after:.3f}"
    return line + f"{task_accuracy_change(summary)}; model written to {summary['model']}"


def sft_data(config) -> tuple[list[SftRecord], list[SftRecord], list]:
    """(train records, held-out records, held-out examples with answers or [])."""
    s, task = config.sft, config.task
    if s.data == "task":
        train = task_pool(task, side="train", seed=config.seed)
        examples = list(task_pool(task, side="held_out"))
        records = records_from_examples(list(train), s.response_template)
        return records, records_from_examples(examples, s.response_template), examples
    # A file's records go to a side by the hash of their prompt (jaxrl_llm.data.split), as a
    # task's questions do; the held-out loss reads at most eval_records of the test side, and
    # the selection side's records are neither trained on nor scored here.
    fractions = dict(
        held_out_fraction=task.held_out_fraction,
        selection_fraction=task.get("selection_fraction", DEFAULT_SELECTION_FRACTION),
    )
    if s.data.startswith("tfds:"):
        path = s.data.removeprefix("tfds:")
        source = TfdsSource(path, data_dir=os.path.join(os.path.dirname(path), "tfds"))
        examples = list(source)
        pairs = list(
            zip(records_from_examples(examples, s.response_template), examples, strict=True)
        )
        sides = partition(pairs, lambda pair: pair[1].question, **fractions)
        train, held = sides.train, sides.test
        train_records = [record for record, _ in train]
        held, held_examples = [r for r, _ in held], [e for _, e in held]
    else:
        records = read_sft_jsonl(s.data)
        check_no_duplicates(s.data, [r.prompt for r in records], range(1, len(records) + 1))
        sides = partition(records, lambda r: r.prompt, **fractions)
        train_records, held = sides.train, sides.test
        held_examples = []
    if not held or not train_records:
        raise ValueError(
            f"config.sft.data={s.data!r}: its {len(train_records) + len(held)} records give "
            f"{len(train_records)} training and {len(held)} held-out records by prompt hash "
            f"({100 * fractions['held_out_fraction']:g}% held out); add records or change "
            "config.task.held_out_fraction."
        )
    return train_records, held[: s.eval_records], held_examples[: s.eval_records]


class SftRun:
    """One SFT run's state: the policy `Learner`, its data and its evaluation (a `StageRun`)."""

    def __init__(self, config, workdir: str):
        del workdir  # the records come from the config
        self.config = config
        self.model, self.tokenizer = load_policy(config)
        self.model = with_lora(self.model, config)  # LoRA when config.model.lora.rank > 0
        train, held_out, eval_examples = sft_data(config)
        loss = functools.partial(sft_loss, remat=config.train.remat)
        self.learner = stage_learner(self.model, config, loss, num_steps=config.train.num_steps)
        self.batch = RecordBatches(train, self.tokenizer, self.learner, config, config.sft)
        options = record_options(config, config.sft)
        self.eval_sequences = tokenize_records(self.tokenizer, held_out, **options)
        greedy = None
        if eval_examples:  # held-out greedy accuracy needs records with answers
            sets = None  # the task's sets, as an RL run of the config evaluates them
            if config.sft.data != "task":
                sets = [EvalSet("held_out", eval_examples)]
            greedy = GreedyEvaluation(config, self.model, self.tokenizer, sets)
        self.evaluate = PolicyEvaluation(
            config, self.held_out_loss, greedy, lambda: self.learner.params
        )
        self._eval_fn = jax.jit(
            lambda params, batch: (
                sft_loss(merge_for_compute(self.learner.graphdef, params), batch)[0],
                token_accuracy(merge_for_compute(self.learner.graphdef, params), batch),
            )
        )

    def held_out_loss(self) -> dict[str, float]:
        """Mean held-out loss and token accuracy over the held-out records (batches of
        `sft.batch_size`, one sequence per row)."""
        size, losses, accuracies = self.config.sft.batch_size, [], []
        pad_id = self.batch.pad_id
        for start in range(0, len(self.eval_sequences), size):
            chunk = self.eval_sequences[start : start + size]
            chunk = chunk + chunk[: size - len(chunk)] if len(chunk) < size else chunk
            batch = make_sft_batch(chunk, pad_id=pad_id, width=self.config.sft.max_length)
            loss, accuracy = self._eval_fn(self.learner.params, batch)
            losses.append(float(loss))
            accuracies.append(float(accuracy))
        return {
            "eval/loss": float(np.mean(losses)),
            "eval/token_accuracy": float(np.mean(accuracies)),
        }

    def summary(self) -> dict:
        """No fields of its own: the summary's evaluations say it all."""
        return {}


SFT = SupervisedStage(
    "sft", section="sft", validate=validate_sft_config, build=SftRun,
    save=save_policy, output="model", report=_report,
    desc=lambda config: "SFT",
)  # fmt: skip
