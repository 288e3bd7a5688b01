"""Reference answers to the exercises of notebook 05 (optimization): one AdamW update, the warmup-cosine
schedule, gradient accumulation and the loss scaler's update rule."""

import math

import torch


def adamw_update(
    param, grad, m, v, step: int, lr: float, betas: tuple[float, float], eps: float, weight_decay: float
):
    beta1, beta2 = betas
    param = param * (1 - lr * weight_decay)  # decoupled weight decay, before the Adam step
    m = beta1 * m + (1 - beta1) * grad  # running mean of the gradient
    v = beta2 * v + (1 - beta2) * grad * grad  # running mean of its square
    m_hat = m / (1 - beta1**step)  # bias correction: m and v start at 0 (step counts from 1)
    v_hat = v / (1 - beta2**step)
    return param - lr * m_hat / (v_hat.sqrt() + eps), m, v


def warmup_cosine(step: int, max_lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    if step < warmup_steps:
        return max_lr * (step + 1) / warmup_steps  # step 0 already trains
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / (decay_steps - warmup_steps)  # 0 -> 1
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def accumulate_gradients(model: torch.nn.Module, micro_batches) -> float:
    total = 0.0
    for x, y in micro_batches:
        _, loss = model(x, y)
        (loss / len(micro_batches)).backward()  # .grad adds up: the mean over all micro-batches
        total += loss.item()
    return total / len(micro_batches)


def scaler_update(scale: float, found_inf: bool, clean_steps: int, growth_interval: int) -> tuple[float, int]:
    if found_inf:
        return scale * 0.5, 0  # overflow: halve, and start counting again
    clean_steps += 1
    if clean_steps == growth_interval:
        return scale * 2.0, 0  # growth_interval clean steps in a row: double
    return scale, clean_steps
