"""JetStreamEngine driven by JetStream's own orchestrator equals our greedy `generate`.

Needs the optional `jetstream` extra (google-jetstream pulls TensorFlow, about 2 GB); without it
the tests are skipped with that reason. CI installs the extra in its own environment and runs
them through `scripts/test_jetstream.sh`, where a missing JetStream fails instead.
"""

import asyncio
import logging
import os

import pytest

if os.environ.get("JAXRL_REQUIRE_JETSTREAM"):
    # scripts/test_jetstream.sh (CI's JetStream target): an import failure is a failure, not a skip.
    import jetstream.core.orchestrator as orchestrator
else:
    orchestrator = pytest.importorskip(
        "jetstream.core.orchestrator",
        reason="google-jetstream is not installed: bash scripts/test_jetstream.sh sets it up",
    )
# Importing the orchestrator turns the root logger to DEBUG with a stdout handler; quiet it.
logging.getLogger().setLevel(logging.WARNING)

import jax  # noqa: E402
import tokenizers  # noqa: E402
from jetstream.core.proto import jetstream_pb2  # noqa: E402
from jetstream.engine import engine_api  # noqa: E402
from tokenizers import Regex, decoders, pre_tokenizers  # noqa: E402

from jaxrl_llm.models import Tokenizer  # noqa: E402
from jaxrl_llm.rollout import JetStreamEngine, generate  # noqa: E402

MAX_TOKENS = 6


def _char_tokenizer(vocab_size=256) -> Tokenizer:
    """One printable character per token id (U+0100 + id), so per-token texts concatenate."""
    vocab = {chr(0x100 + i): i for i in range(vocab_size)}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token=chr(0x100)))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return Tokenizer(backend)


def _text(ids):
    return "".join(chr(0x100 + i) for i in ids)


async def _decode(client, text: str, max_tokens: int):
    request = jetstream_pb2.DecodeRequest(
        text_content=jetstream_pb2.DecodeRequest.TextContent(text=text), max_tokens=max_tokens
    )
    texts, ids = [], []
    async for response in client.Decode(request):
        sample = response.stream_content.samples[0]
        texts.append(sample.text)
        ids.extend(sample.token_ids)
    return "".join(texts), ids


def _serve(engine, texts, max_tokens):
    """[(text, token ids)] of each request, decoded concurrently by JetStream's orchestrator
    with `engine` as both its prefill and its generate engine."""
    params = engine.load_params()
    driver = orchestrator.Driver(
        prefill_engines=[engine],
        generate_engines=[engine],
        prefill_params=[params],
        generate_params=[params],
        interleaved_mode=True,
    )
    # JetStream's threads answer each request through its event loop, and its detokenize thread
    # may close a finished request's channel after the client has read the last token. With
    # `asyncio.run` the loop was closed by then at times ("Event loop is closed"), and JetStream
    # SIGKILLs the process when one of its threads raises: the loop stays open until the driver's
    # threads have stopped.
    loop = asyncio.new_event_loop()
    try:
        client = orchestrator.LLMOrchestrator(driver=driver)

        async def run_all():
            return await asyncio.gather(*(_decode(client, t, max_tokens) for t in texts))

        return loop.run_until_complete(run_all())
    finally:
        driver.stop()
        loop.close()


def test_orchestrator_matches_greedy_generate(tiny_model, monkeypatch):
    # google-jetstream 0.2.2's orchestrator frees prefixes with `jax.tree_map`, which JAX removed
    # (0.6); alias it to `jax.tree.map` for this test only. Without it the generate thread dies
    # and JetStream SIGKILLs the process.
    monkeypatch.setattr(jax, "tree_map", jax.tree.map, raising=False)
    tokenizer = _char_tokenizer()
    prompts = [[5, 17, 3], [9, 1, 22, 40, 41, 42, 7, 8, 100, 2], [77], [30, 31, 32, 33], [200]]
    # An EOS id that request 0 meets at its third token, so one request stops early.
    probe = generate(tiny_model, prompts[:1], max_new_tokens=MAX_TOKENS, temperature=0.0)
    eos = probe.completions()[0][2]
    expected = generate(
        tiny_model, prompts, max_new_tokens=MAX_TOKENS, temperature=0.0, eos_ids=[eos]
    ).completions()
    # JetStream streams tokens up to (not including) the stop token.
    expected = [c[:-1] if c and c[-1] == eos else c for c in expected]
    assert len(expected[0]) == 2

    engine = JetStreamEngine(
        tiny_model,
        tokenizer,
        max_concurrent_decodes=2,  # 5 requests over 2 slots: slots are reused after inserts
        max_prefill_length=32,
        max_target_length=64,
        eos_ids=(eos,),
    )
    assert isinstance(engine, engine_api.Engine)
    results = _serve(engine, [_text(p) for p in prompts], MAX_TOKENS)
    for (text, ids), want in zip(results, expected, strict=True):
        assert ids == want
        assert text == tokenizer.decode(want)


@pytest.mark.slow
def test_orchestrator_smollm2_texts_equal_greedy_generate(monkeypatch):
    """The real SmolLM2 chat model: texts streamed by JetStream equal our greedy completions."""
    monkeypatch.setattr(jax, "tree_map", jax.tree.map, raising=False)
    from jaxrl_llm.models import from_pretrained

    try:
        model, tokenizer = from_pretrained("smollm2-135m-instruct")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    questions = ["What is the capital of France?", "Name a primary colour.", "Say hello."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
    max_tokens = 16
    eos = model.config.eos_token_id
    ours = generate(
        model, [tokenizer.encode(t) for t in texts], max_new_tokens=max_tokens, temperature=0.0
    ).completions()
    ours = [c[:-1] if c and c[-1] == eos else c for c in ours]

    engine = JetStreamEngine(
        model, tokenizer, max_concurrent_decodes=2, max_prefill_length=64, max_target_length=96
    )
    results = _serve(engine, texts, max_tokens)
    assert "Paris" in results[0][0]
    for (text, ids), want in zip(results, ours, strict=True):
        assert ids == want
        assert text == tokenizer.decode(want)
