"""Rendering a question, or a user's chat conversation, into the model's chat format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["CHAT_ROLES", "ChatTemplate", "check_messages", "prompt_messages", "render_prompt"]

# The roles a conversation given as a prompt may hold (every chat template knows these three).
CHAT_ROLES = ("system", "user", "assistant")


class ChatTemplate(Protocol):
    """What `render_prompt` needs of a tokenizer (`jaxrl_llm.models.Tokenizer` has it).

    Example:
      >>> tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    """

    def apply_chat_template(self, messages, *, add_generation_prompt: bool = True) -> str: ...


def check_messages(value: Any, *, where: str) -> tuple[dict[str, str], ...]:
    """A prompt given as chat messages, checked: a non-empty list of `{"role", "content"}`
    objects, roles among `CHAT_ROLES`, a system message only first, the last one the user's
    (the model answers it).

    Args:
      value: the prompt as the data holds it.
      where: names the prompt in errors, e.g. "prompts.jsonl:3".

    Returns:
      The messages as plain `{"role": str, "content": str}` dicts (other keys dropped).

    Raises:
      ValueError: one line naming `where`, the message at fault and the fix.

    Example:
      >>> check_messages([{"role": "user", "content": "2 + 3 ="}], where="x.jsonl:1")
      ({'role': 'user', 'content': '2 + 3 ='},)
    """
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ValueError(
            f"{where}: a chat prompt must be a non-empty list of "
            '{"role": ..., "content": ...} messages.'
        )
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise ValueError(
                f"{where}: message {i} must be an object with a string 'content', got "
                f"{str(message)[:60]!r}."
            )
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise ValueError(
                f"{where}: message {i} has role {role!r}; a prompt's roles are {CHAT_ROLES} "
                "(rename it, or fold tool output into a user message)."
            )
        if role == "system" and i:
            raise ValueError(f"{where}: message {i} is a system message; put it first.")
        messages.append({"role": role, "content": message["content"]})
    if messages[-1]["role"] != "user":
        raise ValueError(
            f"{where}: the last message is the {messages[-1]['role']}'s; a prompt ends with "
            "the user's message, which the model answers."
        )
    return tuple(messages)


def prompt_messages(
    question: str,
    *,
    system_prompt: str | None = None,
    instruction_suffix: str = "",
    messages: Sequence[Mapping[str, str]] | None = None,
) -> list[dict[str, str]]:
    """The chat messages of one prompt, before the template.

    Args:
      question: the user's message (unused when `messages` is given).
      system_prompt: a system message; None leaves the template's default. With `messages`,
        added only when the conversation has no system message of its own.
      instruction_suffix: appended verbatim to the (last) user message.
      messages: a conversation to render instead of `question` (`check_messages`).

    Example:
      >>> prompt_messages("2 + 3 =", system_prompt="Be brief.", instruction_suffix=" Go.")
      [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2 + 3 = Go.'}]
    """
    if messages is None:
        messages = [{"role": "user", "content": question}]
    out = [{"role": m["role"], "content": m["content"]} for m in messages]
    out[-1]["content"] += instruction_suffix
    if system_prompt is not None and out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": system_prompt})
    return out


def render_prompt(
    tokenizer: ChatTemplate,
    question: str,
    *,
    system_prompt: str | None = None,
    instruction_suffix: str = "",
    messages: Sequence[Mapping[str, str]] | None = None,
) -> str:
    """The chat-formatted prompt text for one question, ending with the assistant's turn opener.

    Args:
      tokenizer: has `apply_chat_template(messages, add_generation_prompt=...)`.
      question: the user's message.
      system_prompt: a system message; None leaves the template's default (SmolLM2's template then
        inserts its own system message, "You are a helpful AI assistant named SmolLM, ...").
      instruction_suffix: appended verbatim to the question, e.g. "\\nAnswer with a number only."
      messages: a whole conversation to render instead of `question` (an `Example.messages`):
        `system_prompt` applies only when it has no system message, `instruction_suffix` goes
        after its last user message.

    Returns:
      The prompt text; encode it with `tokenizer.encode` (it already holds the special tokens).

    Example (a ChatML template):
      >>> render_prompt(tokenizer, "2 + 3 =", system_prompt="Be brief.", instruction_suffix=" Go.")
      '<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\n2 + 3 = Go.<|im_end|>\\n<|im_start|>assistant\\n'
    """
    chat = prompt_messages(
        question,
        system_prompt=system_prompt,
        instruction_suffix=instruction_suffix,
        messages=messages,
    )
    return tokenizer.apply_chat_template(chat, add_generation_prompt=True)
