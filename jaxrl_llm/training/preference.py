"""Preference training on pairs of completions: the batch layout, the config and the loss of a
policy, shared by the offline preference stage and the online algorithms (online DPO).

    rows = pair_rows(chosen_ids, rejected_ids, ...)            # P pairs -> 2P interleaved rows
    loss, metrics = preference_loss(model, rows, config=PreferenceLossConfig(loss_type="sigmoid"))

Row 2p is pair p's chosen completion, row 2p + 1 its rejected one, so any contiguous split of
the rows into minibatches of an even size keeps pairs whole. The loss types (`PREFERENCE_LOSSES`):
DPO's "sigmoid" (cDPO with label smoothing), "ipo" and "hinge" against a frozen reference; "kto"
(each pair's chosen completion is a desirable example, its rejected one an undesirable one);
and the reference-free "simpo" and "orpo". The formulas are `jaxrl_llm.losses.preference`'s.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections

from jaxrl_llm import losses
from jaxrl_llm.training.logprobs import sequence_logprobs

Array = jax.Array

PREFERENCE_LOSSES = ("sigmoid", "ipo", "hinge", "kto", "simpo", "orpo")
REFERENCE_FREE = ("simpo", "orpo")


def preference_section(**overrides) -> ml_collections.ConfigDict:
    """The config fields of a preference loss (`config.loss` online, `config.preference`
    offline), with the callers' defaults."""
    c = ml_collections.ConfigDict()
    # sigmoid (DPO), ipo, hinge (SLiC), kto, simpo or orpo (the last two need no reference).
    c.loss_type = "sigmoid"
    # DPO / IPO / hinge / KTO inverse temperature; SimPO's reward scale; ORPO's lambda.
    c.beta = 0.1
    # cDPO: probability that a label is flipped (sigmoid and simpo), in [0, 0.5).
    c.label_smoothing = 0.0
    # SimPO's target reward margin gamma.
    c.simpo_gamma = 0.5
    # KTO's weights of desirable (chosen) and undesirable (rejected) completions.
    c.kto_desirable_weight = 1.0
    c.kto_undesirable_weight = 1.0
    c.update(overrides)
    return c


def validate_preference_section(section: ml_collections.ConfigDict, name: str) -> None:
    """Raises ValueError naming the first bad field of a `preference_section` at `config.<name>`."""
    if section.loss_type not in PREFERENCE_LOSSES:
        raise ValueError(
            f"config.{name}.loss_type={section.loss_type!r} must be one of {PREFERENCE_LOSSES}."
        )
    if not section.beta > 0:
        raise ValueError(f"config.{name}.beta={section.beta} must be > 0.")
    if not 0.0 <= section.label_smoothing < 0.5:
        raise ValueError(
            f"config.{name}.label_smoothing={section.label_smoothing} must be in [0, 0.5)."
        )
    if section.label_smoothing and section.loss_type not in ("sigmoid", "simpo"):
        raise ValueError(
            f"config.{name}.label_smoothing applies to loss_type 'sigmoid' or 'simpo', not "
            f"{section.loss_type!r}: set it to 0."
        )
    for field in ("kto_desirable_weight", "kto_undesirable_weight"):
        if not section[field] > 0:
            raise ValueError(f"config.{name}.{field}={section[field]} must be > 0.")


@dataclasses.dataclass(frozen=True)
class PreferenceLossConfig:
    """Hyper-parameters of `preference_loss` (hashable: closed over by the jitted step).

    Attributes:
      loss_type: one of `PREFERENCE_LOSSES`.
      beta, label_smoothing, simpo_gamma, kto_desirable_weight, kto_undesirable_weight: see
        `preference_section`.
      temperature: log-probs are of logits / temperature (online: the rollout's, as the
        reference role computes them; offline: 1).
      remat: the model's gradient checkpointing (`config.train.remat`).
    """

    loss_type: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5
    kto_desirable_weight: float = 1.0
    kto_undesirable_weight: float = 1.0
    temperature: float = 1.0
    remat: bool | str = "full"

    @classmethod
    def from_section(cls, section, *, temperature: float, remat) -> PreferenceLossConfig:
        """From a `preference_section` and the run's temperature and remat policy."""
        return cls(
            loss_type=section.loss_type,
            beta=section.beta,
            label_smoothing=section.label_smoothing,
            simpo_gamma=section.simpo_gamma,
            kto_desirable_weight=section.kto_desirable_weight,
            kto_undesirable_weight=section.kto_undesirable_weight,
            temperature=temperature,
            remat=remat,
        )

    @property
    def needs_reference(self) -> bool:
        """Whether the loss reads reference log-probs (all but SimPO and ORPO)."""
        return self.loss_type not in REFERENCE_FREE


class PairRows(NamedTuple):
    """P preference pairs as 2P rows: row 2p chosen, row 2p + 1 rejected.

    Attributes:
      tokens: int32 [2P, T] prompt + completion, left-aligned, padded.
      loss_mask: float32 [2P, T], 1 at completion tokens.
      ref_logp: float32 [2P] the reference's summed completion log-probs (zeros when the loss
        is reference-free).
      weights: float32 [P] pair weights (0 drops a pair: a tie, or padding).
    """

    tokens: Array
    loss_mask: Array
    ref_logp: Array
    weights: Array


def pair_loss(
    logp_m: Array, tokens_m: Array, ref_logp_m: Array, weights_p: Array, *, config
) -> tuple[Array, dict[str, Array]]:
    """The preference loss of summed completion log-probs laid out as `PairRows`.

    Args:
      logp_m: [2P] the policy's summed completion log-probs.
      tokens_m: [2P] completion lengths in tokens.
      ref_logp_m: [2P] the reference's summed log-probs (unused by SimPO and ORPO).
      weights_p: [P] pair weights.
      config: a `PreferenceLossConfig`.

    Returns:
      (loss, metrics): the loss function's metrics plus "chosen_logp" and "rejected_logp"
      (weighted means of the summed log-probs).
    """
    c = config
    pc, pr, nc, nr = logp_m[0::2], logp_m[1::2], tokens_m[0::2], tokens_m[1::2]
    rc, rr = ref_logp_m[0::2], ref_logp_m[1::2]
    total = jnp.maximum(weights_p.sum(), 1e-9)

    def pair_mean(x_p):  # a metric: the weighted mean over real pairs, no gradient
        return jax.lax.stop_gradient((weights_p * x_p).sum() / total)

    if c.loss_type in ("sigmoid", "hinge"):
        loss, metrics = losses.dpo(
            pc, pr, rc, rr, beta=c.beta, loss_type=c.loss_type,
            label_smoothing=c.label_smoothing, weights_b=weights_p,
        )  # fmt: skip
    elif c.loss_type == "ipo":  # IPO on mean per-token log-probs (TRL's convention)
        nc, nr = jnp.maximum(nc, 1.0), jnp.maximum(nr, 1.0)
        loss, metrics = losses.dpo(
            pc / nc, pr / nr, rc / nc, rr / nr, beta=c.beta, loss_type="ipo", weights_b=weights_p
        )
    elif c.loss_type == "kto":
        desirable = jnp.arange(logp_m.shape[0]) % 2 == 0
        loss, metrics = losses.kto(
            logp_m, ref_logp_m, desirable, beta=c.beta,
            desirable_weight=c.kto_desirable_weight,
            undesirable_weight=c.kto_undesirable_weight,
            weights_b=jnp.repeat(weights_p, 2),
        )  # fmt: skip
        gap_p = (pc - rc) - (pr - rr)  # KTO has no pairs; its pairs here still rank
        metrics["reward_accuracy"] = pair_mean(gap_p > 0)
    elif c.loss_type == "simpo":
        loss, metrics = losses.simpo(
            pc, pr, nc, nr, beta=c.beta, gamma=c.simpo_gamma,
            label_smoothing=c.label_smoothing, weights_b=weights_p,
        )  # fmt: skip
    elif c.loss_type == "orpo":
        loss, metrics = losses.orpo(pc, pr, nc, nr, lam=c.beta, weights_b=weights_p)
    else:
        raise ValueError(f"pair_loss: loss_type={c.loss_type!r} not in {PREFERENCE_LOSSES}.")
    metrics = dict(
        metrics,
        chosen_logp=pair_mean(pc),
        rejected_logp=pair_mean(pr),
    )
    return loss, metrics


def completion_logprobs(model, tokens_bt: Array, mask_bt: Array, *, config) -> tuple[Array, Array]:
    """(summed completion log-probs [B], completion lengths [B]) of `model` on its rows."""
    logp_bt, _ = sequence_logprobs(
        model, tokens_bt, temperature=config.temperature, remat=config.remat
    )
    mask = mask_bt.astype(jnp.float32)
    return (logp_bt * mask).sum(-1), mask.sum(-1)


def preference_loss(model, rows: PairRows, *, config) -> tuple[Array, dict[str, Array]]:
    """`pair_loss` of `model`'s log-probs on `rows` (a `PairRows`)."""
    logp_m, tokens_m = completion_logprobs(model, rows.tokens, rows.loss_mask, config=config)
    return pair_loss(logp_m, tokens_m, rows.ref_logp, rows.weights, config=config)
