"""Chat prompts in, completions out: rendering, the end-of-turn-aware generator, decoding."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxrl_llm.data import Example, render_prompt
from jaxrl_llm.rollout.engine import GenerationConfig, Generator


def prompt_ids(
    tokenizer, examples: Sequence[Example], *, system_prompt=None, instruction_suffix=""
) -> tuple[list[str], list[list[int]]]:
    """Rendered chat prompts and their token ids (an example with `messages` renders as that
    conversation)."""
    texts = [
        render_prompt(
            tokenizer,
            e.question,
            system_prompt=system_prompt,
            instruction_suffix=instruction_suffix,
            messages=e.messages,
        )
        for e in examples
    ]
    return texts, tokenizer.batch_encode(texts)


def completion_texts(tokenizer, rollout) -> list[str]:
    """Completions as text, special tokens (EOS, <|im_end|>) removed, and a stop text that ends
    one removed too (base models' plain prompt format: "\\nQuestion:", "\\n\\n")."""
    stop_texts = _stop_texts(tokenizer)
    texts = []
    for ids in rollout.completions():
        text = tokenizer.decode(ids, skip_special_tokens=True)
        end = next((stop for stop in stop_texts if text.endswith(stop)), "")
        texts.append(text[: len(text) - len(end)])
    return texts


def _stop_texts(tokenizer) -> tuple[str, ...]:
    """The tokenizer's `stop_texts()`; () for tokenizers without the method (test doubles)."""
    return tuple(getattr(tokenizer, "stop_texts", tuple)())


def response_rows(
    tokenizer, prompt_ids_list, responses: Sequence[str], *, width: int, max_new_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Given responses after their prompts, in the `Rollout` layout: each row is the prompt's
    ids, the response's ids and the end-of-turn token (cut to `max_new_tokens`), then padding.

    Returns:
      (tokens int32 [N, width], completion_mask bool [N, width]).
    """
    tokens = np.full((len(responses), width), tokenizer.pad_token_id or 0, np.int32)
    mask = np.zeros((len(responses), width), bool)
    for i, (prompt, response) in enumerate(zip(prompt_ids_list, responses, strict=True)):
        completion = (tokenizer.encode(response) + [tokenizer.eos_token_id])[:max_new_tokens]
        ids = list(prompt) + completion
        if len(ids) > width:
            raise ValueError(f"response_rows: row {i} has {len(ids)} tokens > width={width}.")
        tokens[i, : len(ids)] = ids
        mask[i, len(prompt) : len(ids)] = True
    return tokens, mask


def chat_generator(
    model,
    tokenizer,
    *,
    max_new_tokens: int,
    temperature: float,
    min_prompt_bucket: int = 16,
    min_batch_bucket: int = 1,
    cache_shardings=None,
    **options,
) -> Generator:
    """A `Generator` that stops at the tokenizer's end-of-turn ids and pads with its pad id.

    `options` are further `GenerationConfig` fields (compaction, prefix_sharing, ...).
    """
    return Generator(
        model,
        chat_generation_config(
            tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            min_prompt_bucket=min_prompt_bucket,
            min_batch_bucket=min_batch_bucket,
            **options,
        ),
        cache_shardings=cache_shardings,
    )


def chat_generation_config(tokenizer, **fields) -> GenerationConfig:
    """A `GenerationConfig` ending at the tokenizer's end-of-turn ids and stop sequences (base
    models' plain prompt format: "\\nQuestion:"), padded with its pad id."""
    stops = [tuple(s) for s in getattr(tokenizer, "stop_sequences", list)()]
    stops += [tuple(s) for s in fields.pop("stop_sequences", ())]
    return GenerationConfig(
        eos_ids=tuple(tokenizer.stop_token_ids()),
        pad_id=tokenizer.pad_token_id or 0,
        stop_sequences=tuple(dict.fromkeys(stops)),
        **fields,
    )
