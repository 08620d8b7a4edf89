"""pass@k and maj@k from n sampled answers per problem, as pure functions of numbers.

pass@k: the probability that at least one of k samples is correct, estimated without bias from
n >= k samples of which c are correct (Chen et al. 2021, "Evaluating Large Language Models
Trained on Code", eq. 1):

    pass@k = 1 - C(n - c, k) / C(n, k)

maj@k (self-consistency, Wang et al. 2023): the probability that the most frequent answer among
k samples is correct. From n >= k samples it is averaged over every k-subset of the n (exactly
when there are at most `MAJ_EXACT_SUBSETS` subsets, else over that many seeded random subsets).
A tie between answers goes to the one whose first sample comes first; a sample with no answer
(None) does not vote; a subset where nobody answered counts as wrong.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence

import numpy as np

__all__ = ["MAJ_EXACT_SUBSETS", "maj_at_k", "majority_answer", "pass_at_k"]

# maj@k averages over all k-subsets of n samples up to this many subsets, else over this many
# random ones.
MAJ_EXACT_SUBSETS = 5000


def pass_at_k(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k of one problem from `num_correct` correct among `num_samples` samples.

    Example:
      >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 3, 2)
      (0.25, 0.5, 1.0)
    """
    n, c = int(num_samples), int(num_correct)
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be in 1..num_samples={n}.")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: num_correct={c} must be in 0..num_samples={n}.")
    if n - c < k:
        return 1.0
    # 1 - prod_{i=n-c+1}^{n} (1 - k / i), the stable form of the binomial ratio.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def majority_answer(answers: Sequence[Hashable | None]) -> int | None:
    """Index of the first sample carrying the most frequent non-None answer, or None.

    Example:
      >>> majority_answer(["3", "4", "4", "3"]), majority_answer([None, None])
      (0, None)
    """
    counts: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        counts[answer] = counts.get(answer, 0) + 1
        first.setdefault(answer, i)
    if not counts:
        return None
    best = max(counts.values())
    return min(first[a] for a, n in counts.items() if n == best)


def maj_at_k(
    answers: Sequence[Hashable | None], correct: Sequence[bool], k: int, *, seed: int = 0
) -> float:
    """maj@k of one problem from its n sampled answers and whether each is correct.

    Args:
      answers: n extracted answers (None: the sample gave none).
      correct: n flags; samples with equal answers must agree.
      k: votes per majority, 1 <= k <= n.
      seed: picks the random subsets when there are more than `MAJ_EXACT_SUBSETS`.

    Example:
      >>> maj_at_k(["7", "5", "7"], [True, False, True], 3)
      1.0
      >>> maj_at_k(["7", "5", "5"], [True, False, False], 2)  # subsets {7,5} {7,5} {5,5}
      0.6666666666666666
    """
    n = len(answers)
    if len(correct) != n:
        raise ValueError(f"maj_at_k: {n} answers but {len(correct)} correctness flags.")
    if not 1 <= k <= n:
        raise ValueError(f"maj_at_k: k={k} must be in 1..{n} (the samples given).")
    if math.comb(n, k) <= MAJ_EXACT_SUBSETS:
        subsets = itertools.combinations(range(n), k)
    else:
        rng = np.random.default_rng(seed)
        subsets = (np.sort(rng.choice(n, size=k, replace=False)) for _ in range(MAJ_EXACT_SUBSETS))
    wins = total = 0
    for subset in subsets:
        winner = majority_answer([answers[i] for i in subset])
        wins += winner is not None and bool(correct[subset[winner]])
        total += 1
    return wins / total
