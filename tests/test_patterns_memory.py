"""Sparse attention patterns in memory as in FLOPs: one keys-per-query arithmetic
(flops.pattern_keys), the same answer in both, and dense attention when the pattern's window
covers the sequence."""

from __future__ import annotations

import pytest

from transformer_calc.flops import AttentionPattern, count_flops, pattern_keys
from transformer_calc.memory import Settings, activation_breakdown, memory_report
from transformer_calc.presets import load_model

GPT2 = load_model("gpt2")
T = 512
PATTERNS = [AttentionPattern("local", window=64), AttentionPattern("strided", block=32),
            AttentionPattern("fixed", block=64, summary=2),
            AttentionPattern("longformer", window=64, global_tokens=8),
            AttentionPattern("bigbird", window=64, global_tokens=8, random=16)]
COVERING = [AttentionPattern("local", window=T), AttentionPattern("strided", block=T),
            AttentionPattern("fixed", block=T, summary=1),
            AttentionPattern("longformer", window=T, global_tokens=4),
            AttentionPattern("bigbird", window=T, global_tokens=4, random=8)]


def _probs(pattern: AttentionPattern) -> int:
    b = activation_breakdown(GPT2, 2, T, act_bytes=2, device="cuda", attention="eager",
                             dropout=False, pattern=pattern)
    return next(i.count for i in b.items if i.name.endswith("attn.softmax"))


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.kind)
def test_memory_and_flops_agree_on_keys_per_query(pattern: AttentionPattern) -> None:
    keys = pattern_keys(pattern, T)
    assert keys < T
    # memory: B · n_heads · T · keys probabilities (2 bytes each, one layer)
    assert _probs(pattern) == 2 * GPT2.n_heads * T * keys * 2
    # FLOPs: 2 · n_heads · d_head · keys per token for the scores
    scores = next(r for r in count_flops(GPT2, T, pattern).rows
                  if r[0] == "decoder.attn.scores")[1]
    assert scores == 2 * GPT2.n_heads * GPT2.head_dim * keys


@pytest.mark.parametrize("pattern", COVERING, ids=lambda p: p.kind)
def test_a_pattern_covering_the_sequence_is_dense(pattern: AttentionPattern) -> None:
    dense = AttentionPattern()
    assert pattern_keys(pattern, T) == T
    s = Settings(precision="bf16", seq_len=T, batch_size=2)
    assert memory_report(GPT2, s, pattern=pattern).activations.total == \
        memory_report(GPT2, s, pattern=dense).activations.total
    assert count_flops(GPT2, T, pattern).total == count_flops(GPT2, T, dense).total


def test_flash_keeps_no_scores_so_a_pattern_saves_no_memory() -> None:
    s = Settings(precision="bf16", seq_len=T, attention="flash")
    sparse = memory_report(GPT2, s, pattern=PATTERNS[0])
    assert sparse.activations.total == memory_report(GPT2, s).activations.total
    assert any("saves compute, not memory" in n for n in sparse.notes)


def test_cli_memory_takes_the_pattern(cli) -> None:
    dense = cli.json("memory", "gpt2", "--seq-len", "512", "--attention", "eager")
    local = cli.json("memory", "gpt2", "--seq-len", "512", "--attention", "eager",
                     "--attention-pattern", "local",
                     "--window", "64")
    assert local["activations"]["bytes"] < dense["activations"]["bytes"]
    r = cli("memory", "gpt2", "--window", "64", code=2)
    assert "--window: applies with --attention-pattern" in r.stderr
