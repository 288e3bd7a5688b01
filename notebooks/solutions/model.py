"""Reference answers to the exercises of notebook 04 (the model): one causal attention head, the
cross-entropy from log-softmax, and top-k filtering of the logits."""

import math

import torch


def causal_head(x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    q, k, v = x @ w_q, x @ w_k, x @ w_v  # (B, T, D) each
    T, D = x.size(1), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, T, T): row t scores every key s
    past = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))  # (T, T): s <= t
    scores = scores.masked_fill(~past, float("-inf"))  # position t never sees s > t
    return scores.softmax(dim=-1) @ v  # (B, T, D): each row of weights sums to 1


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits, dim=-1)  # (N, V): log-sum-exp with the row's maximum taken out first
    return -logp[torch.arange(len(targets)), targets].mean()  # each row's own target


def keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest score of each row
    return logits.masked_fill(logits < kth, float("-inf"))  # a new tensor; the input is untouched
