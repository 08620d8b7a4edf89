"""Rendering a question into the model's chat format, ready for generation."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ChatTemplate", "render_prompt"]


class ChatTemplate(Protocol):
    """What `render_prompt` needs of a tokenizer (`jaxrl_llm.models.Tokenizer` has it).

    Example:
      >>> tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    """

    def apply_chat_template(self, messages, *, add_generation_prompt: bool = True) -> str: ...


def render_prompt(
    tokenizer: ChatTemplate,
    question: str,
    *,
    system_prompt: str | None = None,
    instruction_suffix: str = "",
) -> str:
    """The chat-formatted prompt text for one question, ending with the assistant's turn opener.

    Args:
      tokenizer: has `apply_chat_template(messages, add_generation_prompt=...)`.
      question: the user's message.
      system_prompt: a system message; None leaves the template's default (SmolLM2's template then
        inserts its own system message, "You are a helpful AI assistant named SmolLM, ...").
      instruction_suffix: appended verbatim to the question, e.g. "\\nAnswer with a number only."

    Returns:
      The prompt text; encode it with `tokenizer.encode` (it already holds the special tokens).

    Example (a ChatML template):
      >>> render_prompt(tokenizer, "2 + 3 =", system_prompt="Be brief.", instruction_suffix=" Go.")
      '<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\n2 + 3 = Go.<|im_end|>\\n<|im_start|>assistant\\n'
    """
    messages = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": question + instruction_suffix})
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)
