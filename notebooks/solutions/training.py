"""Reference answer to the exercise of notebook 06 (training): one optimizer step with gradient
accumulation and clipping, in fp32 without a loss scaler."""

import torch


def training_step(model, optimizer, batches, grad_accum: int, grad_clip: float, lr: float) -> float:
    for group in optimizer.param_groups:  # 1. this step's learning rate
        group["lr"] = lr
    total = 0.0
    for _ in range(grad_accum):  # 2. accumulate: each loss divided, so .grad holds the mean's gradient
        x, y = next(batches)
        _, loss = model(x, y)
        (loss / grad_accum).backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)  # 3. clip the global norm, once
    optimizer.step()  # 4. step
    optimizer.zero_grad(set_to_none=True)  # 5. ready for the next step
    return total / grad_accum
