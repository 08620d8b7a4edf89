"""Prompt sources (reasoning-gym, JSONL, tfds, a user's own data), chat rendering and
resumable batching.

Every source is a finite, indexable collection of `Example`s; `Example.score(candidate)` applies the
source's own scorer to an extracted answer.

Example:
  >>> from jaxrl_llm import data
  >>> source = data.task_source("gcd", seed=0, size=1000, split="train")  # numbers up to 67
  >>> batcher = data.PromptBatcher(source, batch_size=8, seed=0)
  >>> prompts = [data.render_prompt(tokenizer, ex.question) for ex in next(batcher)]
"""

from jaxrl_llm.data.batcher import PromptBatcher, PromptSource
from jaxrl_llm.data.example import Example, Scorer, question_id
from jaxrl_llm.data.jsonl import JsonlRecord, JsonlSource, final_answer, read_prompt_jsonl
from jaxrl_llm.data.presets import (
    TaskPreset,
    register_preset,
    resolve_task,
    task_names,
    task_pool,
    task_source,
)
from jaxrl_llm.data.problem_keys import problem_key_for, register_problem_key
from jaxrl_llm.data.prompts import (
    CHAT_ROLES,
    ChatTemplate,
    check_messages,
    prompt_messages,
    render_prompt,
)
from jaxrl_llm.data.reasoning_gym_source import ReasoningGymSource, reasoning_gym_tasks
from jaxrl_llm.data.scoring import (
    math_answer_score,
    math_equal,
    normalize_number,
    parse_math,
    verify_parsed,
)
from jaxrl_llm.data.split import (
    DEFAULT_HELD_OUT_FRACTION,
    DEFAULT_SELECTION_FRACTION,
    SIDES,
    SideIndex,
    Sides,
    distinct_questions,
    normalize_question,
    partition,
    side_of,
)
from jaxrl_llm.data.tfds_source import JsonlPromptBuilder, TfdsSource
from jaxrl_llm.data.user_data import (
    UserData,
    conversation_text,
    load_user_data,
    user_pool,
    uses_user_data,
    write_prompts,
)
from jaxrl_llm.data.user_rows import DATA_FORMATS, DataRow, read_rows

__all__ = [
    "CHAT_ROLES",
    "ChatTemplate",
    "DATA_FORMATS",
    "DEFAULT_HELD_OUT_FRACTION",
    "DEFAULT_SELECTION_FRACTION",
    "DataRow",
    "Example",
    "JsonlPromptBuilder",
    "JsonlRecord",
    "JsonlSource",
    "PromptBatcher",
    "PromptSource",
    "ReasoningGymSource",
    "SIDES",
    "Scorer",
    "SideIndex",
    "Sides",
    "TaskPreset",
    "TfdsSource",
    "UserData",
    "check_messages",
    "conversation_text",
    "distinct_questions",
    "final_answer",
    "load_user_data",
    "math_answer_score",
    "math_equal",
    "normalize_number",
    "normalize_question",
    "parse_math",
    "partition",
    "problem_key_for",
    "prompt_messages",
    "question_id",
    "read_prompt_jsonl",
    "read_rows",
    "reasoning_gym_tasks",
    "register_preset",
    "register_problem_key",
    "render_prompt",
    "resolve_task",
    "side_of",
    "task_names",
    "task_pool",
    "task_source",
    "user_pool",
    "uses_user_data",
    "verify_parsed",
    "write_prompts",
]
