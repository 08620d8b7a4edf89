"""Supervised fine-tuning: chat-formatted (prompt, response) token rows, packing, masked loss.

    sequences = tokenize_records(tokenizer, records, max_length=256)
    batch = make_sft_batch(sequences[:8], pad_id=tokenizer.pad_token_id, width=256, pack=True)
    loss, metrics = sft_loss(model, batch)       # masked next-token NLL over response tokens

The prompt is rendered by the tokenizer's chat template up to the assistant's turn opener (as
the RL stage renders it); the response is the template's assistant turn after it, cut after
the first end-of-turn token, so the model learns to stop. Only response tokens (the end-of-turn
token included) carry loss. "Training language models to follow instructions with human
feedback" (InstructGPT, 2203.02155) is the SFT stage this implements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_llm.data.prompts import render_prompt
from jaxrl_llm.data.sft import SftRecord
from jaxrl_llm.training import packing
from jaxrl_llm.training.logprobs import sequence_logprobs

Array = jax.Array


class SftSequence(NamedTuple):
    """One tokenized record: `ids` = prompt then response; loss on ids[num_prompt:]."""

    ids: list[int]
    num_prompt: int


class SftBatch(NamedTuple):
    """A training batch of R rows of width W.

    Attributes:
      tokens: int32 [R, W], sequences left-aligned (or packed), pad after.
      loss_mask: bool [R, W], True at the response tokens the loss predicts.
      positions, segment_ids: int32 [R, W] for packed rows; None when each row holds one.
    """

    tokens: Array
    loss_mask: Array
    positions: Array | None = None
    segment_ids: Array | None = None


def tokenize_records(
    tokenizer,
    records: Sequence[SftRecord],
    *,
    max_length: int,
    system_prompt: str | None = None,
    instruction_suffix: str = "",
) -> list[SftSequence]:
    """Chat-formats and tokenizes `records`; responses longer than the room left by the prompt
    in `max_length` tokens are truncated (they then carry no end-of-turn token).

    Raises:
      ValueError: a prompt alone fills `max_length` (naming the record).
    """
    stop_ids = set(tokenizer.stop_token_ids())
    out = []
    for i, record in enumerate(records):
        prompt = render_prompt(
            tokenizer,
            record.prompt,
            system_prompt=system_prompt,
            instruction_suffix=instruction_suffix,
        )
        messages = [{"role": "user", "content": record.prompt + instruction_suffix}]
        if system_prompt is not None:
            messages.insert(0, {"role": "system", "content": system_prompt})
        messages.append({"role": "assistant", "content": record.response})
        full = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
        if not full.startswith(prompt):
            raise ValueError(
                "tokenize_records: the chat template does not render the conversation as the "
                "prompt followed by the response; this tokenizer's template is not supported."
            )
        prompt_ids = tokenizer.encode(prompt)
        response_ids = tokenizer.encode(full[len(prompt) :])
        end = next((j for j, t in enumerate(response_ids) if t in stop_ids), None)
        if end is None:
            response_ids.append(tokenizer.eos_token_id)
        else:
            response_ids = response_ids[: end + 1]
        if len(prompt_ids) >= max_length:
            raise ValueError(
                f"tokenize_records: record {i}'s prompt is {len(prompt_ids)} tokens, which "
                f"leaves no room for a response in max_length={max_length}; raise max_length."
            )
        ids = (prompt_ids + response_ids)[:max_length]
        out.append(SftSequence(ids, len(prompt_ids)))
    return out


def make_sft_batch(
    sequences: Sequence[SftSequence],
    *,
    pad_id: int,
    width: int,
    pack: bool = False,
    row_multiple: int = 1,
) -> SftBatch:
    """Rows of `width` tokens: one sequence per row, or packed first-fit (`training.packing`)
    with positions and segment ids. numpy arrays."""
    lengths = np.array([len(s.ids) for s in sequences], np.int64)
    tokens = np.full((len(sequences), width), pad_id, np.int32)
    mask = np.zeros((len(sequences), width), bool)
    for b, s in enumerate(sequences):
        if len(s.ids) > width:
            raise ValueError(f"make_sft_batch: sequence {b} has {len(s.ids)} > width={width}.")
        tokens[b, : len(s.ids)] = s.ids
        mask[b, s.num_prompt : len(s.ids)] = True
    if not pack:
        return SftBatch(tokens, mask)
    plan = packing.plan_packing(lengths, width=width, row_multiple=row_multiple)
    return SftBatch(
        packing.pack(tokens, plan, fill=pad_id),
        packing.pack(mask, plan, fill=False),
        plan.positions,
        plan.segment_ids,
    )


def sft_loss(
    model, batch: SftBatch, *, remat: bool | str = False
) -> tuple[Array, dict[str, Array]]:
    """Mean negative log-likelihood of the response tokens (token-mean over the batch);
    `remat` is the model's gradient checkpointing (`Transformer.hidden_states`).

    Returns:
      `(loss, metrics)`: metrics "tokens" (response tokens in the batch) and "perplexity".
    """
    logp_bt, _ = sequence_logprobs(
        model,
        batch.tokens,
        positions_bt=batch.positions,
        segment_ids_bt=batch.segment_ids,
        remat=remat,
    )
    mask = batch.loss_mask.astype(jnp.float32)
    tokens = jnp.sum(mask)
    loss = -jnp.sum(logp_bt * mask) / jnp.maximum(tokens, 1.0)
    return loss, {"tokens": tokens, "perplexity": jnp.exp(loss)}


def token_accuracy(model, batch: SftBatch) -> Array:
    """Fraction of response tokens that are the model's argmax prediction (evaluation only: it
    materializes [R, W, V] logits)."""
    hidden, _ = model.hidden_states(
        batch.tokens, positions_bt=batch.positions, segment_ids_bt=batch.segment_ids
    )
    logits = jnp.einsum("btd,dv->btv", hidden[:, :-1], model.unembed_matrix())
    hits = (jnp.argmax(logits, axis=-1) == batch.tokens[:, 1:]).astype(jnp.float32)
    mask = batch.loss_mask[:, 1:].astype(jnp.float32)
    return jnp.sum(hits * mask) / jnp.maximum(jnp.sum(mask), 1.0)
