"""Token ids of an episode's prompt and observations, rendered once through the chat template.

A model turn is kept as the ids the sampler drew. What comes between two model turns (the
end-of-turn separator, the observation messages, the opener of the next assistant turn) is the
text the chat template renders after an assistant message, encoded on its own: the boundary is
at the template's end-of-turn token, a special token, so nothing merges across it. This is
where peers went wrong: decoding a turn and encoding the whole conversation again changes ids
(https://github.com/huggingface/trl/issues/5224), and a continuation that forgets the newline after the end-of-turn token trains on
a format the template never produces (https://github.com/volcengine/verl/issues/3960); here the separator is taken from the
template itself.

    renderer = EpisodeRenderer(tokenizer)
    prompt = renderer.prompt_ids([{"role": "user", "content": "12 * 34 ?"}])
    obs = renderer.observation_ids([{"role": "tool", "content": "408"}], last_token=eot_id)
    # SmolLM2: "\\n<|im_start|>tool\\n408<|im_end|>\\n<|im_start|>assistant\\n"
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["EpisodeRenderer"]

# A conversation the template renders before the observation; only the text after its
# assistant message is used.
_USER, _REPLY = "ping", "pong"


class EpisodeRenderer:
    """Renders an episode's prompt and observations with a tokenizer's chat template.

    Args:
      tokenizer: a `jaxrl_llm.models.Tokenizer` (or anything with `apply_chat_template`,
        `encode`, `decode` and `stop_token_ids`) whose template closes an assistant message with
        one of its stop tokens (ChatML's "<|im_end|>", Llama 3's "<|eot_id|>", Gemma's
        "<end_of_turn>").

    Raises:
      ValueError: the template does not close an assistant message with a stop token (a
        template without chat turns, such as the plain "Question: / Answer:" format).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        template = getattr(tokenizer, "chat_template", None) or ""
        self.template_has_tools = "tools" in template
        anchor = self._render([], add_generation_prompt=False)
        reply_end = anchor.rfind(_REPLY)
        if reply_end < 0:
            raise ValueError(
                "EpisodeRenderer: the chat template drops assistant messages; multi-turn "
                "episodes need a template that renders them (a chat model's template)."
            )
        reply_end += len(_REPLY)
        after = anchor[reply_end:]
        stops = {tokenizer.decode([i]): i for i in tokenizer.stop_token_ids()}
        closing = [text for text in stops if text and after.startswith(text)]
        if not closing:
            raise ValueError(
                "EpisodeRenderer: the chat template does not end an assistant message with one "
                f"of the tokenizer's stop tokens {sorted(stops)} (it renders {after!r} after "
                "one); multi-turn episodes need a chat template with an end-of-turn token."
            )
        self.end_of_turn_text = max(closing, key=len)
        self.end_of_turn_id = stops[self.end_of_turn_text]
        self._prefix_len = reply_end

    def _render(self, messages, *, add_generation_prompt: bool, tools=None) -> str:
        conversation = [
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": _REPLY},
        ]
        kwargs = {"tools": tools} if tools else {}
        return self.tokenizer.apply_chat_template(
            conversation + list(messages), add_generation_prompt=add_generation_prompt, **kwargs
        )

    def prompt_ids(self, messages: Sequence[dict], *, tools: Sequence[dict] = ()) -> list[int]:
        """Ids of the opening messages followed by the assistant turn's opener.

        `tools` (JSON schemas) go to templates that have a tool section; for the others the
        environment describes its tools in the system message itself.
        """
        kwargs = {"tools": list(tools)} if tools and self.template_has_tools else {}
        text = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, **kwargs
        )
        return self.tokenizer.encode(text)

    def observation_text(self, messages: Sequence[dict], *, turn_closed: bool) -> str:
        """The text between a model turn and the next one: the end-of-turn separator (its
        token only when the turn did not sample it), the messages, the next turn's opener."""
        full = self._render(messages, add_generation_prompt=True)
        text = full[self._prefix_len :]
        if turn_closed:
            text = text[len(self.end_of_turn_text) :]
        return text

    def observation_ids(self, messages: Sequence[dict], *, last_token: int) -> list[int]:
        """Ids of `observation_text` after a model turn whose last sampled id is `last_token`
        (the turn is closed when that id is the template's end-of-turn token)."""
        closed = int(last_token) == self.end_of_turn_id
        return self.tokenizer.encode(self.observation_text(messages, turn_closed=closed))

    def reply_text(self, turn_ids: Sequence[int]) -> str:
        """A model turn's text for the environment: special tokens (end of turn) removed."""
        return self.tokenizer.decode(list(turn_ids), skip_special_tokens=True)
