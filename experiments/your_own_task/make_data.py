"""Writes the guide's own task (docs/your_own_task.md): shopping totals, a task reasoning-gym
does not have. "A pen costs 7 dollars and a book costs 12 dollars. Compute the total cost.
Reply with the number only." -> 19. (SmolLM2-135M-Instruct restates a story at length; asked
for the number only, with 64 new tokens, it is right on about a third of them greedily.)

    python experiments/your_own_task/make_data.py            # writes the two files below

A problem is its pair of prices (the same two prices with other names and items are the same
sum), written to the `problem` column. Each pair goes to one file by a hash of that key, so no
held-out problem is trained on: `train.jsonl` (2,000 prompts) and `held_out.jsonl` (300 prompts,
300 distinct problems). The run carves its selection side off the training file by the same
key (`config.task.data.key_column = "problem"`). Deterministic: the files are committed, and
rerunning the script rewrites them byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys

ITEMS = ("pen", "book", "cap", "mug", "kite", "lamp", "ball", "scarf", "clock", "plant", "bag",
         "shirt", "puzzle", "radio", "vase")  # fmt: skip
TEMPLATE = (
    "A {a_item} costs {a} dollars and a {b_item} costs {b} dollars. Compute the total cost. "
    "Reply with the number only."
)
MAX_PRICE = 99
HELD_OUT_SHARE = 0.1  # of the problems (price pairs)
TRAIN_PROMPTS, HELD_OUT_PROMPTS = 2000, 300
HERE = os.path.dirname(os.path.abspath(__file__))


def held_out(key: str) -> bool:
    """Whether a problem key hashes to the held-out file (first 8 bytes of SHA-256 < share)."""
    position = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64
    return position < HELD_OUT_SHARE


def row(rng: random.Random, a: int, b: int) -> dict:
    """One prompt for the prices a <= b, in a random order and with random items."""
    first, second = (a, b) if rng.random() < 0.5 else (b, a)
    a_item, b_item = rng.sample(ITEMS, 2)
    prompt = TEMPLATE.format(a_item=a_item, a=first, b_item=b_item, b=second)
    return {"prompt": prompt, "answer": str(a + b), "problem": f"{a}+{b}"}


def rows(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows): each problem on one side, held-out problems distinct."""
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(1, MAX_PRICE + 1) for b in range(a, MAX_PRICE + 1)]
    test_pairs = [p for p in pairs if held_out(f"{p[0]}+{p[1]}")]
    train_pairs = [p for p in pairs if not held_out(f"{p[0]}+{p[1]}")]
    test = [row(rng, *p) for p in rng.sample(test_pairs, HELD_OUT_PROMPTS)]
    train, seen = [], set()
    while len(train) < TRAIN_PROMPTS:
        candidate = row(rng, *rng.choice(train_pairs))
        if candidate["prompt"] not in seen:  # no prompt twice
            seen.add(candidate["prompt"])
            train.append(candidate)
    return train, test


def write(path: str, lines: list[dict]) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)


def main(out: str = HERE) -> None:
    train, test = rows()
    write(os.path.join(out, "train.jsonl"), train)
    write(os.path.join(out, "held_out.jsonl"), test)
    print(f"wrote {len(train)} training and {len(test)} held-out prompts to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
