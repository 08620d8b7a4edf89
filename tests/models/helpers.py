"""Shared fixtures for model tests: a tiny byte-level BPE tokenizer and a tiny HF directory."""

import json
import os

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_tiny_tokenizer(path: str, vocab_size: int = 300) -> None:
    """Trains a small byte-level BPE on a few sentences and writes HF tokenizer files."""
    backend = tokenizers.Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(
        ["the cat sat on the mat", "12 + 7 = 19", "hello world"] * 20, trainer
    )
    os.makedirs(path, exist_ok=True)
    backend.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(
            {"eos_token": "<|im_end|>", "bos_token": "<|im_start|>", "chat_template": CHATML}, f
        )
