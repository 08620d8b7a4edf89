"""The guide's reward function (docs/your_own_task.md), in TRL's batch shape: one float per
completion, from the prompts, the completions and the data's columns (here "answer")."""

import re

NUMBER = re.compile(r"-?\d+")


def shopping_reward(prompts, completions, answer, **columns):
    """1 when the last number of the completion is the total; 0 for another number; -0.2 for a
    completion without any number (it did not answer)."""
    scores = []
    for completion, total in zip(completions, answer, strict=True):
        numbers = NUMBER.findall(completion)
        scores.append(-0.2 if not numbers else float(numbers[-1] == total))
    return scores
