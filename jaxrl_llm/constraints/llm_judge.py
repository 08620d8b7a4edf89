"""An LLM judge: a frozen model asked a yes/no question about each completion.

CGPO's LLM judges (Xu et al. 2024, arXiv:2409.20370, section 4.3) prompt a model and read its
answer. Here the question (a template over {question}, the example's question text, and
{completion}) is rendered through the tokenizer's chat template and the judge's score is
p(yes) = softmax over the next token's "yes" and "no" spellings at the end of the prompt: one
teacher-forced forward per batch (the same numbers the rollout engine's prefill computes, with
no decode), jitted, `batch_size` rows at a time. A sample is violated when p(yes) is below
`threshold`. The default model is the policy's own base weights, frozen.

A judge call that raises or runs past `timeout_s` gives no verdict for its batch (NaN); the
failure is logged and counted, and the run goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxrl_llm.data import Example
from jaxrl_llm.models.precision import merge_for_compute
from jaxrl_llm.rollout.batching import pack_prompts

log = logging.getLogger(__name__)

DEFAULT_QUESTION = (
    "Question: {question}\nProposed reply: {completion}\n"
    "Is the proposed reply a short final answer to the question? Answer yes or no."
)
_YES, _NO = ("yes", "Yes", " yes", " Yes"), ("no", "No", " no", " No")


def _first_token_ids(tokenizer, spellings) -> list[int]:
    ids = {ids[0] for ids in map(tokenizer.encode, spellings) if ids}
    if not ids:
        raise ValueError(f"LLMJudge: the tokenizer encodes none of {spellings}.")
    return sorted(ids)


class LLMJudge:
    """p(yes) of a frozen model on a yes/no question about each (question, completion).

    Args:
      model: the judge's graph (e.g. the policy's base model; its weights are not used).
      params: its frozen weights (`nnx.State`), e.g. the reference role's.
      tokenizer: the judge's tokenizer (chat template, "yes"/"no" ids).
      question: the template, with {question} and {completion}.
      threshold: violated when p(yes) < threshold.
      batch_size: rows per forward (the last batch is padded: one program).
      timeout_s: a batch slower than this gives no verdict (None: no limit).
    """

    batched = True  # `JudgeMixture` calls `judge_batch` once per batch

    def __init__(
        self,
        model,
        params,
        tokenizer,
        *,
        question: str = DEFAULT_QUESTION,
        threshold: float = 0.5,
        batch_size: int = 16,
        timeout_s: float | None = 60.0,
    ):
        self.tokenizer, self.params, self.question = tokenizer, params, question
        self.threshold, self.batch_size, self.timeout_s = threshold, batch_size, timeout_s
        self.graphdef = nnx.split(model, nnx.Param)[0]
        yes = jnp.asarray(_first_token_ids(tokenizer, _YES))
        no = jnp.asarray(_first_token_ids(tokenizer, _NO))

        def p_yes(params, tokens_bt, lengths_b):
            logits_btv = merge_for_compute(self.graphdef, params)(tokens_bt).astype(jnp.float32)
            last_bv = jnp.take_along_axis(logits_btv, (lengths_b - 1)[:, None, None], axis=1)[:, 0]
            log_yes = jax.nn.logsumexp(last_bv[:, yes], axis=-1)
            log_no = jax.nn.logsumexp(last_bv[:, no], axis=-1)
            return jax.nn.sigmoid(log_yes - log_no)

        self._p_yes = jax.jit(p_yes)
        self.last_scores: np.ndarray | None = None

    def prompts(self, completions: Sequence[str], examples: Sequence[Example]) -> list[list[int]]:
        """Token ids of the judge's question about each completion (chat-formatted)."""
        ids = []
        for completion, example in zip(completions, examples, strict=True):
            text = self.question.format(question=example.question, completion=completion.strip())
            ids.append(
                self.tokenizer.encode(
                    self.tokenizer.apply_chat_template(
                        [{"role": "user", "content": text}], add_generation_prompt=True
                    )
                )
            )
        return ids

    def scores(self, completions: Sequence[str], examples: Sequence[Example]) -> np.ndarray:
        """float32 [B] p(yes)."""
        ids, out = self.prompts(completions, examples), []
        for start in range(0, len(ids), self.batch_size):
            packed = pack_prompts(
                ids[start : start + self.batch_size],
                pad_id=self.tokenizer.pad_token_id or 0,
                min_prompt_bucket=64,
                min_batch_bucket=self.batch_size,
            )
            p = self._p_yes(self.params, packed.tokens, packed.lengths)
            out.append(np.asarray(p)[: packed.batch_size])
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0,), np.float32)

    def judge_batch(self, prompts, completions, examples) -> np.ndarray:
        """float32 [B]: 1 violated (p(yes) < threshold), 0 not; all NaN when the call failed
        or timed out (logged)."""
        del prompts
        result: dict = {}

        def run():
            try:
                result["scores"] = self.scores(completions, examples)
            except Exception as error:  # a judge failure never stops the run
                result["error"] = error

        thread = threading.Thread(target=run, name="llm-judge", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if "scores" not in result:
            reason = result.get("error", f"no answer within {self.timeout_s} s")
            log.warning("LLM judge gave no verdict for a batch of %d: %s", len(completions), reason)
            self.last_scores = None
            return np.full(len(completions), np.nan, np.float32)
        self.last_scores = result["scores"]
        return (result["scores"] < self.threshold).astype(np.float32)
