"""Chat prompts in, completions out: rendering, the end-of-turn-aware generator, decoding."""

from __future__ import annotations

from collections.abc import Sequence

from jaxrl_llm.data import Example, render_prompt
from jaxrl_llm.rollout.engine import GenerationConfig, Generator


def prompt_ids(
    tokenizer, examples: Sequence[Example], *, system_prompt=None, instruction_suffix=""
) -> tuple[list[str], list[list[int]]]:
    """Rendered chat prompts and their token ids."""
    texts = [
        render_prompt(
            tokenizer,
            e.question,
            system_prompt=system_prompt,
            instruction_suffix=instruction_suffix,
        )
        for e in examples
    ]
    return texts, tokenizer.batch_encode(texts)


def completion_texts(tokenizer, rollout) -> list[str]:
    """Completions as text, special tokens (EOS, <|im_end|>) removed."""
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in rollout.completions()]


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
    """A `GenerationConfig` ending at the tokenizer's end-of-turn ids, padded with its pad id."""
    return GenerationConfig(
        eos_ids=tuple(tokenizer.stop_token_ids()), pad_id=tokenizer.pad_token_id or 0, **fields
    )
