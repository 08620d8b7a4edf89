"""The offline preference stage: DPO and its family on a file of comparison pairs.

    python -m jaxrl_llm.main --config experiments/configs/dpo_smollm2.py --workdir runs/dpo \
        --config.preference.pairs=runs/rm/pairs.jsonl

Pairs are the pair JSONL of the reward-model stage (`jaxrl_llm.data.pairs`: prompt, chosen,
rejected); `preference.pairs = ""` makes them the same way, from the policy's own samples scored
by the task's verifier (`stages.reward_model.make_pairs`). Losses (`preference.loss_type`):
DPO "sigmoid" (with `label_smoothing`: cDPO), "ipo", "hinge", "kto" (each pair's chosen
completion desirable, its rejected one undesirable), and the reference-free "simpo" and "orpo"
(`jaxrl_llm.training.preference`). The reference is the initial policy: its summed completion
log-probs of every pair are computed once and cached in `<workdir>/reference_logps.npz` (keyed
by the pair file's digest and the model), so a resumed run never recomputes them.

Logged: the train loss and the loss's metrics (reward margin and accuracy, chosen and rejected
log-probs) every step; the same on held-out pairs (split by prompt) before, every
`preference.eval_every` steps and after; and the task's held-out greedy accuracy before and
after (`config.eval`), logged as an RL run logs it ("eval/accuracy", the selection side as
"eval/selection/accuracy", per-question records in eval_questions.jsonl), so
`jaxrl_llm.report` reads the run beside RL runs. The trained policy is written to `<workdir>/model`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import zipfile
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxrl_llm.data.pairs import Pair, read_pairs_jsonl
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.roles import place_batch
from jaxrl_llm.runners.components import load_policy, with_lora
from jaxrl_llm.stages.data import labelled_items, step_indices
from jaxrl_llm.stages.parts import (
    GreedyEvaluation,
    PolicyEvaluation,
    check_sampled_labels_section,
    percent_change,
    stage_config,
    stage_learner,
    task_accuracy_change,
)
from jaxrl_llm.stages.reward_model import PAIR_SECTION_FIELDS, make_pairs, pair_fields
from jaxrl_llm.stages.supervised import SupervisedStage, save_policy, train_stage
from jaxrl_llm.training.preference import (
    PairRows,
    PreferenceLossConfig,
    completion_logprobs,
    pair_loss,
    preference_loss,
    preference_section,
    validate_preference_section,
)


def offline_preference_section() -> ml_collections.ConfigDict:
    """The `config.preference` fields: the loss (`preference_section`), then the pairs and
    the batches as the reward-model stage has them (`reward_model.pair_fields`)."""
    return pair_fields(preference_section())


def preference_config(loss_type: str = "sigmoid") -> ml_collections.ConfigDict:
    """The default offline preference configuration (SmolLM2-135M-Instruct, chain_sum)."""
    return stage_config(
        "preference", "preference", offline_preference_section(), loss_type=loss_type
    )


def validate_preference_config(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError naming the first bad field of a preference config, and the fix."""
    validate_preference_section(config.preference, "preference")
    check_sampled_labels_section(config, "preference", PAIR_SECTION_FIELDS, labels="pairs")


def train_preference(config: ml_collections.ConfigDict, workdir: str, *, progress: bool = True):
    """Runs (or resumes) the offline preference stage; returns its summary (summary.json)."""
    return train_stage(PREFERENCE, config, workdir, progress=progress)


def _report(summary: dict[str, Any]) -> str:
    change = percent_change(summary, "eval/reward_accuracy")
    line = (
        f"[jaxrl_llm] {summary['loss_type']}: held-out pair reward accuracy {change} "
        f"({summary['steps']} updates)"
    )
    return line + f"{task_accuracy_change(summary)}; model written to {summary['model']}"


def encode_pair(tokenizer, pair: Pair) -> tuple[list[int], int, list[int], int]:
    """(chosen ids, chosen prompt length, rejected ids, rejected prompt length): the rendered
    prompt's tokens, then the completion's, then the end-of-turn token the policy must learn
    to emit."""
    prompt = tokenizer.encode(pair.prompt)
    end = [tokenizer.eos_token_id]
    chosen = prompt + tokenizer.encode(pair.chosen) + end
    rejected = prompt + tokenizer.encode(pair.rejected) + end
    return chosen, len(prompt), rejected, len(prompt)


def pair_rows(encoded: list, ref_logp_p2: np.ndarray, weights_p: np.ndarray, *, width, pad_id):
    """`PairRows` (numpy) of encoded pairs, their reference log-probs [P, 2] and weights [P]."""
    tokens = np.full((2 * len(encoded), width), pad_id, np.int32)
    mask = np.zeros((2 * len(encoded), width), np.float32)
    for p, (chosen, n_chosen, rejected, n_rejected) in enumerate(encoded):
        for row, ids, start in ((2 * p, chosen, n_chosen), (2 * p + 1, rejected, n_rejected)):
            tokens[row, : len(ids)] = ids
            mask[row, start : len(ids)] = 1.0
    ref = np.asarray(ref_logp_p2, np.float32).reshape(-1)
    return PairRows(tokens, mask, ref, np.asarray(weights_p, np.float32))


class PreferenceRun:
    """One offline preference run: the encoded pairs, the reference log-probs, the `Learner`
    (a `StageRun`)."""

    def __init__(self, config, workdir: str):
        self.config, self.workdir, p = config, workdir, config.preference
        self.model, self.tokenizer = load_policy(config)
        self.model = with_lora(self.model, config)  # LoRA when config.model.lora.rank > 0
        split, self.pair_stats = labelled_items(
            config, "preference", "pairs", workdir,
            make=lambda path, journal: make_pairs(
                config, self.model, self.tokenizer, path, journal, section="preference"
            ),
            read=read_pairs_jsonl, encode=self._encode,
        )  # fmt: skip
        self.encoded, self.train, self.held = split.encoded, split.train, split.held
        self.width = split.width
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.pair_stats.update(
            pairs=len(self.encoded),
            train_pairs=len(self.train),
            eval_pairs=len(self.held),
            dropped=split.dropped,
        )
        self.loss_config = PreferenceLossConfig.from_section(
            p, temperature=1.0, remat=config.train.remat
        )
        loss = functools.partial(preference_loss, config=self.loss_config)
        self.learner = stage_learner(self.model, config, loss, num_steps=config.train.num_steps)
        greedy = GreedyEvaluation(config, self.model, self.tokenizer)
        self.evaluate = PolicyEvaluation(config, self.held_out, greedy, lambda: self.learner.params)
        graphdef, eval_config = self.learner.graphdef, self.loss_config
        self._logp_fn = jax.jit(
            lambda params, tokens, mask: completion_logprobs(
                merge_for_compute(graphdef, params), tokens, mask, config=eval_config
            )
        )
        self.ref_logp = self._reference_logps(split.path)  # [pairs, 2], the initial policy's

    def _encode(self, pair: Pair):
        """(prompt, `encode_pair`'s encoding, the chosen and rejected ids)."""
        encoded = encode_pair(self.tokenizer, pair)
        return pair.prompt, encoded, (encoded[0], encoded[2])

    def _rows(self, indices, weights=None) -> PairRows:
        encoded = [self.encoded[i] for i in indices]
        weights = np.ones(len(indices), np.float32) if weights is None else weights
        return pair_rows(
            encoded, self.ref_logp[indices], weights, width=self.width, pad_id=self.pad_id
        )

    def _reference_logps(self, path: str) -> np.ndarray:
        """float32 [pairs, 2] summed completion log-probs of the initial policy (zeros for a
        reference-free loss), from the cache when it matches the pair file and the model."""
        if not self.loss_config.needs_reference:
            return np.zeros((len(self.encoded), 2), np.float32)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        key = f"{digest} {self.config.model.name} {self.config.model.init} {self.config.seed}"
        key += f" {self.config.preference.max_length}"
        cache = os.path.join(self.workdir, "reference_logps.npz")
        if os.path.isfile(cache):
            try:
                with np.load(cache) as saved:
                    if str(saved["key"]) == key:
                        return saved["ref_logp"]
            except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:  # recomputed below
                print(f"[jaxrl_llm] {cache} is unreadable ({type(e).__name__}); recomputing it")
        size, out = self.config.preference.batch_size, []
        zeros = np.zeros((len(self.encoded), 2), np.float32)
        for start in range(0, len(self.encoded), size):
            indices = np.arange(start, min(start + size, len(self.encoded)))
            indices = np.resize(indices, size)  # one compiled shape
            rows = pair_rows(
                [self.encoded[i] for i in indices], zeros[indices], np.ones(size),
                width=self.width, pad_id=self.pad_id,
            )  # fmt: skip
            logp, _ = self._logp_fn(self.learner.params, rows.tokens, rows.loss_mask)
            out.append(np.asarray(logp).reshape(size, 2)[: min(size, len(self.encoded) - start)])
        ref = np.concatenate(out).astype(np.float32)
        os.makedirs(self.workdir, exist_ok=True)
        np.savez(cache + ".tmp.npz", ref_logp=ref, key=np.array(key))
        os.replace(cache + ".tmp.npz", cache)
        return ref

    def batch(self, step: int):
        """Update `step`'s pairs (epochs of a seeded permutation), placed."""
        size = self.config.preference.batch_size
        chosen = [
            self.train[i] for i in step_indices(self.config.seed, step, size, len(self.train))
        ]
        return place_batch(self._rows(chosen), self.learner.mesh, self.learner.rules)

    def held_out(self) -> dict[str, float]:
        """The loss and its metrics on every held-out pair once (weighted by real pairs)."""
        size, sums, count = self.config.preference.batch_size, {}, 0
        for start in range(0, len(self.held), size):
            chunk = self.held[start : start + size]
            real = len(chunk)
            weights = np.r_[np.ones(real), np.zeros(size - real)].astype(np.float32)
            rows = self._rows(np.resize(np.asarray(chunk), size), weights)
            logp, tokens = self._logp_fn(self.learner.params, rows.tokens, rows.loss_mask)
            loss, metrics = pair_loss(
                logp, tokens, jnp.asarray(rows.ref_logp), jnp.asarray(weights),
                config=self.loss_config,
            )  # fmt: skip
            for k, v in {"loss": loss, **metrics}.items():
                sums[k] = sums.get(k, 0.0) + float(v) * real
            count += real
        return {f"eval/{k}": v / count for k, v in sums.items()}

    def summary(self) -> dict[str, Any]:
        """The loss type and the pair counts."""
        return {"loss_type": self.config.preference.loss_type, "pairs": self.pair_stats}


PREFERENCE = SupervisedStage(
    "preference", section="preference", validate=validate_preference_config, build=PreferenceRun,
    save=save_policy, output="model", report=_report,
    desc=lambda config: config.preference.loss_type.upper(),
)  # fmt: skip
