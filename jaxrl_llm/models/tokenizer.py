"""Tokenizer: a thin wrapper over Hugging Face `tokenizers` plus a jinja2 chat template.

Built from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`) or from the vocabulary,
merges and chat template stored in a GGUF file's metadata (byte-level BPE, or Gemma's
SentencePiece BPE vocabulary, whose merges are rebuilt from the token order).

Checkpoints without a chat template (base models such as Gemma 3 270M) get `PLAIN_TEMPLATE`:
"Question: ...\nAnswer:" turns, so earlier turns of a conversation act as few-shot examples, and
an answer ends at a blank line or where the model starts the next question (`PLAIN_STOP_TEXTS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import jinja2
import jinja2.sandbox
import tokenizers
from tokenizers import decoders, normalizers, pre_tokenizers, processors

# GGUF token types (llama.cpp's llama_token_type): 3 = control, 4 = user defined.
_GGUF_CONTROL, _GGUF_USER_DEFINED = 3, 4
_SENTENCEPIECE_SPACE = "\u2581"  # "▁", SentencePiece's spelling of a space

# The prompt format of base (not instruction-tuned) models, used when the checkpoint has no chat
# template: an optional system message as a preamble, then "Question: ...\nAnswer: ..." turns
# separated by a blank line (earlier turns are few-shot examples); the generation prompt is
# "Answer:". BOS first when the tokenizer wants it (Gemma does). Replace it by setting
# `Tokenizer.chat_template`.
PLAIN_TEMPLATE = (
    "{% if add_bos_token and bos_token %}{{ bos_token }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}Question: {{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}Answer: {{ message['content'] }}\n\n"
    "{% else %}{{ raise_exception('PLAIN_TEMPLATE: unknown role ' + message['role']) }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)
# Where a PLAIN_TEMPLATE answer ends: the blank line between turns, or a new "Question:" the
# model starts after one newline (zero-shot, Gemma 3 270M answers " Paris\nQuestion: ..."); the
# stop sequences of few-shot evaluation harnesses.
PLAIN_STOP_TEXTS = ("\n\n", "\nQuestion:")

# Pre-tokenizer regexes of the byte-level BPE families, keyed by GGUF `tokenizer.ggml.pre`.
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = _LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def _pre_tokenizer_for(pre: str):
    if pre in ("smollm", "starcoder", "refact"):  # GPT-2 regex after splitting digits one by one
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    if pre in ("gpt2", "default", "gpt-2"):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    patterns = {"llama-bpe": _LLAMA3_PATTERN, "llama3": _LLAMA3_PATTERN, "qwen2": _QWEN2_PATTERN}
    if pre in patterns:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(tokenizers.Regex(patterns[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise ValueError(
        f"GGUF tokenizer.ggml.pre={pre!r} is not supported; known byte-level BPE pre-tokenizers: "
        "smollm, gpt2, llama-bpe, qwen2. Load the model from a Hugging Face directory instead."
    )


def _raise_template_exception(message):
    raise jinja2.exceptions.TemplateError(message)


class Tokenizer:
    """Encode, decode and chat templating for one model.

    Args:
      backend: a `tokenizers.Tokenizer`.
      chat_template: a jinja2 chat template (Hugging Face convention), or None.
      eos_token, bos_token, pad_token: special token strings, or None.
      add_bos_token: whether sequences start with BOS (Gemma: yes). The chat template then
        writes it, and `encode(..., add_special_tokens=True)` prepends it.

    Example:
      >>> ids = tokenizer.encode("12 + 7 =")
      >>> tokenizer.decode(ids)
      '12 + 7 ='
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        chat_template: str | None = None,
        eos_token: str | None = None,
        bos_token: str | None = None,
        pad_token: str | None = None,
        add_bos_token: bool = False,
    ):
        self.backend = backend
        self.chat_template = chat_template
        self.eos_token, self.bos_token, self.pad_token = eos_token, bos_token, pad_token
        self.add_bos_token = add_bos_token
        for name in ("eos_token", "bos_token", "pad_token"):
            token = getattr(self, name)
            if token is not None and backend.token_to_id(token) is None:
                raise ValueError(f"Tokenizer: {name}={token!r} is not in the vocabulary.")
        if add_bos_token and bos_token is None:
            raise ValueError("Tokenizer: add_bos_token=True needs a bos_token.")

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def from_hf_directory(cls, path: str) -> Tokenizer:
        """Reads `tokenizer.json` and, if present, `tokenizer_config.json` from a directory."""
        tokenizer_file = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(tokenizer_file):
            raise FileNotFoundError(
                f"No tokenizer.json in {path!r}: a Hugging Face model directory needs "
                "tokenizer.json (fast tokenizer format) next to config.json."
            )
        try:
            backend = tokenizers.Tokenizer.from_file(tokenizer_file)
        except Exception as e:  # tokenizers raises a bare Exception on malformed JSON
            raise ValueError(f"Could not parse tokenizer file {tokenizer_file!r}: {e}") from e
        config: dict[str, Any] = {}
        config_file = os.path.join(path, "tokenizer_config.json")
        if os.path.isfile(config_file):
            with open(config_file) as f:
                config = json.load(f)

        def token(name):
            value = config.get(name)
            return value.get("content") if isinstance(value, dict) else value

        return cls(
            backend,
            chat_template=config.get("chat_template"),
            eos_token=token("eos_token"),
            bos_token=token("bos_token"),
            pad_token=token("pad_token"),
            add_bos_token=bool(config.get("add_bos_token", False))
            and token("bos_token") is not None,
        )

    @classmethod
    def from_gguf_vocabulary(
        cls,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int],
        *,
        pre: str,
        chat_template: str | None,
        bos_token_id: int | None,
        eos_token_id: int | None,
        pad_token_id: int | None,
    ) -> Tokenizer:
        """Builds a byte-level BPE tokenizer from GGUF `tokenizer.ggml.*` metadata."""
        vocab = {token: i for i, token in enumerate(tokens)}
        merge_pairs = [tuple(m.split(" ", 1)) for m in merges]
        backend = tokenizers.Tokenizer(
            tokenizers.models.BPE(vocab=vocab, merges=merge_pairs, fuse_unk=False)
        )
        backend.pre_tokenizer = _pre_tokenizer_for(pre)
        backend.decoder = decoders.ByteLevel()
        specials = [
            tokenizers.AddedToken(tokens[i], special=True, normalized=False)
            for i, kind in enumerate(token_types)
            if kind in (_GGUF_CONTROL, _GGUF_USER_DEFINED)
        ]
        backend.add_special_tokens(specials)

        return cls(
            backend,
            chat_template=chat_template,
            eos_token=_token_at(tokens, eos_token_id),
            bos_token=_token_at(tokens, bos_token_id),
            pad_token=_token_at(tokens, pad_token_id),
        )

    @classmethod
    def from_gguf_sentencepiece(
        cls,
        tokens: Sequence[str],
        token_types: Sequence[int],
        *,
        chat_template: str | None,
        bos_token_id: int | None,
        eos_token_id: int | None,
        pad_token_id: int | None,
        unk_token_id: int | None,
        add_bos_token: bool,
    ) -> Tokenizer:
        """Gemma's SentencePiece BPE vocabulary (GGUF `tokenizer.ggml.model == "llama"`).

        The same tokenizer transformers builds from the file (its GGUF `gemma_tokenizer` and
        `GemmaTokenizer`): spaces normalised to "▁", byte fallback for unknown characters, and
        merges rebuilt from the vocabulary (the file lists none), ranked by the merged token's
        position in the vocabulary. Control tokens are special; user-defined ones ("\\n\\n",
        "<table>", ...) are matched whole.
        """
        # Runs of spaces are stored with real spaces; the model's pieces spell them with "▁".
        pieces = [
            _SENTENCEPIECE_SPACE * len(t) if " " in t and not t.strip() else t for t in tokens
        ]
        vocab = {piece: i for i, piece in enumerate(pieces)}
        unk = None if unk_token_id is None else pieces[unk_token_id]
        backend = tokenizers.Tokenizer(
            tokenizers.models.BPE(
                vocab=vocab,
                merges=_merges_by_vocabulary_order(pieces, vocab),
                unk_token=unk,
                fuse_unk=True,
                byte_fallback=True,
            )
        )
        backend.normalizer = normalizers.Replace(" ", _SENTENCEPIECE_SPACE)
        backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        backend.decoder = decoders.Sequence(
            [decoders.Replace(_SENTENCEPIECE_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
        )
        kinds = list(token_types)
        backend.add_special_tokens(
            [
                tokenizers.AddedToken(t, special=True, normalized=False)
                for t, kind in zip(tokens, kinds, strict=True)
                if kind == _GGUF_CONTROL
            ]
        )
        backend.add_tokens(
            [
                tokenizers.AddedToken(t, special=False, normalized=False)
                for t, kind in zip(tokens, kinds, strict=True)
                if kind == _GGUF_USER_DEFINED and t in vocab
            ]
        )

        bos = _token_at(tokens, bos_token_id)
        if add_bos_token and bos is not None:
            backend.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A",
                pair=f"{bos} $A {bos}:1 $B:1",
                special_tokens=[(bos, bos_token_id)],
            )
        return cls(
            backend,
            chat_template=chat_template,
            eos_token=_token_at(tokens, eos_token_id),
            bos_token=bos,
            pad_token=_token_at(tokens, pad_token_id),
            add_bos_token=add_bos_token and bos is not None,
        )

    def save(self, path: str) -> None:
        """Writes `tokenizer.json` and `tokenizer_config.json` (Hugging Face format) into `path`."""
        os.makedirs(path, exist_ok=True)
        self.backend.save(os.path.join(path, "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": self.eos_token,
            "bos_token": self.bos_token,
            "pad_token": self.pad_token,
            "add_bos_token": self.add_bos_token,
            "clean_up_tokenization_spaces": False,
            "model_max_length": 1_000_000,
        }
        if self.chat_template is not None:
            config["chat_template"] = self.chat_template
        with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)

    # --- encoding ---------------------------------------------------------------------------
    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Special-token strings inside the text map to their ids."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def batch_encode(
        self, texts: Sequence[str], *, add_special_tokens: bool = False
    ) -> list[list[int]]:
        """Token ids of each text (ragged lists; no padding)."""
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of token ids."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def batch_decode(self, batch: Sequence[Sequence[int]], *, skip_special_tokens: bool = False):
        """Texts of several id lists."""
        return [self.decode(ids, skip_special_tokens=skip_special_tokens) for ids in batch]

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, str]],
        *,
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **template_kwargs: Any,
    ) -> str | list[int]:
        """Renders `messages` ([{"role": ..., "content": ...}]) with the model's chat template,
        or with `PLAIN_TEMPLATE` when the checkpoint has none (base models).

        Uses jinja2's sandbox with Hugging Face's settings (trim_blocks, lstrip_blocks), so templates
        written for `transformers` render the same here.

        Example (no chat template, Gemma 3 270M):
          >>> tokenizer.apply_chat_template([{"role": "user", "content": "2 + 3?"}])
          '<bos>Question: 2 + 3?\\nAnswer:'
        """
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = _raise_template_exception
        env.filters["tojson"] = lambda x, indent=None: json.dumps(x, indent=indent)
        text = env.from_string(self.chat_template or PLAIN_TEMPLATE).render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            eos_token=self.eos_token,
            bos_token=self.bos_token,
            add_bos_token=self.add_bos_token,
            **template_kwargs,
        )
        return self.encode(text) if tokenize else text

    # --- special tokens ---------------------------------------------------------------------
    def token_to_id(self, token: str) -> int | None:
        """Id of one token string, or None."""
        return self.backend.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        """Id of the end-of-sequence token."""
        return None if self.eos_token is None else self.backend.token_to_id(self.eos_token)

    @property
    def bos_token_id(self) -> int | None:
        """Id of the beginning-of-sequence token."""
        return None if self.bos_token is None else self.backend.token_to_id(self.bos_token)

    @property
    def pad_token_id(self) -> int | None:
        """Id of the padding token (falls back to EOS)."""
        if self.pad_token is None:
            return self.eos_token_id
        return self.backend.token_to_id(self.pad_token)

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def stop_token_ids(self) -> list[int]:
        """Ids that end a chat turn: EOS and, where present, ChatML's <|im_end|> / <|eot_id|>
        and Gemma's <end_of_turn>; also each of `stop_texts()` that is one token (Gemma's
        "\\n\\n")."""
        ids = {self.eos_token_id}
        for token in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>"):
            ids.add(self.backend.token_to_id(token))
        for ids_of_text in map(self.encode, self.stop_texts()):
            if len(ids_of_text) == 1:
                ids.add(ids_of_text[0])
        return sorted(i for i in ids if i is not None)

    def stop_texts(self) -> tuple[str, ...]:
        """Texts that end an answer besides the stop tokens: `PLAIN_STOP_TEXTS` when the
        tokenizer has no chat template (its answers are rendered by `PLAIN_TEMPLATE`), else ()."""
        return PLAIN_STOP_TEXTS if self.chat_template is None else ()

    def stop_sequences(self) -> list[list[int]]:
        """Token-id sequences of the `stop_texts()` longer than one token, for the decode
        engine's `stop_sequences` (Gemma: "\\nQuestion:" is [107, 14977, 236787])."""
        return [ids for ids in map(self.encode, self.stop_texts()) if len(ids) > 1]


def check_tokenizer_fits(tokenizer: Tokenizer, embedding_rows: int, *, where: str, fix: str):
    """Refuses a tokenizer with ids the model has no embedding row for.

    More rows than tokens is normal (Qwen2.5 pads its 151,665 tokens to 151,936 rows for
    efficient matmuls; the extra rows are never produced by the tokenizer); fewer would make
    the embedding look-up of the highest ids read out of range.

    Args:
      tokenizer: the tokenizer loaded or saved beside the model.
      embedding_rows: the model's vocabulary size (rows of its embedding, `[V, D]`).
      where: the file, directory or function, for the message.
      fix: what to do about it, for the message.

    Raises:
      ValueError: the tokenizer's highest id + 1 exceeds `embedding_rows`; one line naming both
        sizes and `fix`.
    """
    ids = tokenizer.backend.get_vocab(with_added_tokens=True).values()
    tokens = max(ids, default=-1) + 1  # the ids a model must embed, gaps included
    if tokens > embedding_rows:
        raise ValueError(
            f"{where}: the tokenizer has {tokens:,} tokens but the model's embedding has only "
            f"{embedding_rows:,} rows (vocab_size), so ids {embedding_rows:,}-{tokens - 1:,} "
            f"cannot be embedded (more rows than tokens is fine, fewer is not): {fix}."
        )


def _token_at(tokens: Sequence[str], i: int | None) -> str | None:
    """The GGUF vocabulary's token `i`, or None for an absent or out-of-range id."""
    return None if i is None or i >= len(tokens) else tokens[i]


def _merges_by_vocabulary_order(
    pieces: Sequence[str], vocab: dict[str, int]
) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary whose order is its merge order.

    Every split of a piece into two pieces of the vocabulary is a merge; merges rank by the merged
    piece's position (earlier first), then by a longer left part (transformers' `generate_merges`
    with Gemma's vocabulary-order scores, so both tokenizers agree).
    """
    ranked = []
    for rank, piece in enumerate(pieces):
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((rank, -cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, left, right in ranked]
