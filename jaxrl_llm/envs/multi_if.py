"""Multi-turn instruction following (Multi-IF style): the environment and its examples.

See "Multi-IF: Benchmarking LLMs on Multi-Turn and Multilingual Instructions Following"
(arXiv:2410.15553) and IFEval (arXiv:2311.07911). A conversation has K user turns; each adds
verifiable instructions (`jaxrl_llm.envs.instructions`) and keeps the earlier ones that still
apply. The reward of turn k is the fraction of its instructions the reply follows; the next
user message is the observation. Accuracy is reported per turn: "turn<k>/accuracy" (every
instruction of turn k followed) and "turn<k>/instructions" (the fraction followed).

    examples = multi_if_examples(100, seed=0, split="train")
    env = MultiIFEnv()
    env.reset(examples[0])      # [{"role": "user", "content": "Describe a pet cat ..."}]
    env.step("a cat naps all day.")   # reward 1.0 if it follows the turn's instructions
"""

from __future__ import annotations

from jaxrl_llm.data import Example
from jaxrl_llm.envs.base import Environment, StepResult
from jaxrl_llm.envs.multi_if_data import Conversation, make_conversations, score_turn

__all__ = ["MultiIFEnv", "multi_if_examples"]


def multi_if_examples(
    count: int,
    *,
    seed: int,
    split: str = "train",
    num_turns: int = 3,
    instructions_per_turn: int = 1,
) -> list[Example]:
    """`count` generated conversations as `Example`s (question: the first user turn; the
    conversation in `metadata["conversation"]`)."""
    conversations = make_conversations(
        count, seed=seed, split=split, num_turns=num_turns,
        instructions_per_turn=instructions_per_turn,
    )  # fmt: skip
    return [
        Example(c.user_turns[0], "", "multi_if", i, {"conversation": c})
        for i, c in enumerate(conversations)
    ]


class MultiIFEnv(Environment):
    """One conversation: user turn k, the model's reply, its instruction score, turn k + 1.

    Args:
      system_prompt: an optional system message before the first user turn.
    """

    def __init__(self, *, system_prompt: str | None = None):
        self.system_prompt = system_prompt
        self.conversation: Conversation | None = None
        self.scores: list[float] = []

    def reset(self, example) -> list[dict[str, str]]:
        self.conversation, self.scores = example.metadata["conversation"], []
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": self.conversation.user_turns[0]}]

    def step(self, reply: str) -> StepResult:
        turn = len(self.scores)
        score, verdicts = score_turn(self.conversation, turn, reply)
        self.scores.append(score)
        turns = self.conversation.user_turns
        done = turn + 1 >= len(turns)
        observation = [] if done else [{"role": "user", "content": turns[turn + 1]}]
        counts = {"instructions/checked": len(verdicts), "instructions/followed": sum(verdicts)}
        info = {f"turn{k}/score": s for k, s in enumerate(self.scores)}
        info["correct"] = float(all(s == 1.0 for s in self.scores) and done)
        return StepResult(observation, score, done, counts, info)
